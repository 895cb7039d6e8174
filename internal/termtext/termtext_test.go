package termtext

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/termtext/termtexttest"
)

var hostile = termtexttest.Hostile

func TestQuoteLeavesNoRawControlByte(t *testing.T) {
	for _, h := range hostile {
		q := Quote(h)
		require.Equal(t, strconv.Quote(h), q, "a hostile string is Go-quoted")
		require.True(t, Plain(q), "Quote(%q) = %q still holds a raw control", h, q)
		require.Equal(t, -1, termtexttest.RawControl(q))
		if !strings.Contains(h, "\n") {
			require.NotEqual(t, -1, termtexttest.RawControl(h), "the corpus checker sees %q", h)
		}
		back, err := strconv.Unquote(q)
		require.NoError(t, err)
		require.Equal(t, h, back, "the quoted form says exactly what the string holds")
	}
}

func TestQuotePrintsPlainNamesAsTheyAre(t *testing.T) {
	for _, s := range []string{"web-0", "kube-system", "deployments.apps/shop/web", "a b", "crème brûlée", "名前", `say "hi"`, `back\slash`} {
		require.Equal(t, s, Quote(s))
	}
	// Quoted exactly when it begins with '"': no plain value can pass for a
	// quoted one.
	require.Equal(t, `"\"x\""`, Quote(`"x"`))
	require.Empty(t, Quote(""))
}

func TestControlFindsWhatNoKubernetesNameHolds(t *testing.T) {
	for _, h := range hostile {
		_, bad := Control(h)
		require.True(t, bad, "%q", h)
	}
	for _, s := range []string{"web-0", "crème", "名前", "a b", "emoji\u200d"} {
		_, bad := Control(s)
		require.False(t, bad, "%q", s)
	}
	r, _ := Control("a\x1bb")
	require.Equal(t, "U+001B (a control character)", Describe(r))
	r, _ = Control("a\u202eb")
	require.Equal(t, "U+202E (a bidi control)", Describe(r))
	r, _ = Control("a\xffb")
	require.Equal(t, "a byte that is not UTF-8", Describe(r))
	for r := rune(0); r <= 0x10ffff; r++ {
		if IsControl(r) {
			require.False(t, Plain(string(r)), "every refused rune is quoted when shown: %U", r)
		}
	}
}

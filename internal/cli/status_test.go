package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/leader"
)

// frames receives each Write (a live status writes a frame at once).
type frames chan string

func (f frames) Write(p []byte) (int, error) {
	f <- string(p)
	return len(p), nil
}

func (f frames) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-f:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no frame in 20s")
		return ""
	}
}

// TestStatusRedrawsLiveOnATerminal: on a terminal, lethe status clears
// the screen and draws the summary, then draws it again when the catalog
// changes (another process's write, through the change feed: the
// --interval is an hour away), until its context ends, with exit 0.
// Off a terminal it prints once, without the clearing sequence.
func TestStatusRedrawsLiveOnATerminal(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	require.NoError(t, os.MkdirAll(home, 0o700))
	ctx := context.Background()
	st, err := drivers.Open(ctx, "sqlite://"+filepath.Join(home, "lethe.db"), nil)
	require.NoError(t, err)
	defer st.Close()
	_, err = st.Create(ctx, &catalog.Resource{Kind: "Database", Namespace: "shop", Name: "orders"})
	require.NoError(t, err)
	_, err = st.AcquireLeader(ctx, leader.NameDefault, "host-a", time.Hour)
	require.NoError(t, err)

	code, out, stderr := run(t, home, false, "", "status")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, out, clearScreen)
	require.Regexp(t, `Leader:\s+host-a \(term 1, lease for`, out)
	require.Regexp(t, `Database\s+1\s+0\s+0`, out)

	f := make(frames, 10)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan int)
	go func() {
		done <- Run(rctx, []string{"status", "--interval", "1h"}, Streams{
			In: strings.NewReader(""), Out: f, Err: f,
			Getenv:         func(k string) string { return map[string]string{"LETHE_HOME": home}[k] },
			InteractiveOut: true,
		}, nil)
	}()
	first := f.next(t)
	require.True(t, strings.HasPrefix(first, clearScreen), "%q", first)
	require.Regexp(t, `Database\s+1\s+0\s+0`, first)

	_, err = st.Create(ctx, &catalog.Resource{Kind: "Database", Namespace: "shop", Name: "users"})
	require.NoError(t, err)
	second := f.next(t)
	require.True(t, strings.HasPrefix(second, clearScreen), "%q", second)
	require.Regexp(t, `Database\s+2\s+0\s+0`, second)

	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code)
	case <-time.After(20 * time.Second):
		t.Fatal("status did not stop when its context ended")
	}
}

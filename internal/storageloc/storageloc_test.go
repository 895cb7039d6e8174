package storageloc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/storageloc"
)

// TestResolveNeedsOneDefaultAndNoCredentialsOnTheCommandLine: the
// declared locations have unique names and URLs and one default (the only
// one needs no mark), --storage is the one-location shortcut, and a URL
// carrying credentials is refused without repeating them.
func TestResolveNeedsOneDefaultAndNoCredentialsOnTheCommandLine(t *testing.T) {
	s, err := storageloc.Resolve(nil, "file:///srv/b/", false)
	require.NoError(t, err)
	require.Equal(t, storageloc.Set{{Name: "default", URL: "file:///srv/b", Default: true}}, s)

	s, err = storageloc.Resolve([]string{"zeta=file:///z,readOnly", "main=s3://bkt/velero?region=eu-west-1,default"}, "", false)
	require.NoError(t, err)
	require.Equal(t, "main", s.Default().Name)
	require.True(t, s[1].ReadOnly)
	l, ok := s.ByURL("file:///z/")
	require.True(t, ok)
	require.Equal(t, "zeta", l.Name)
	l, ok = s.ByURL("")
	require.True(t, ok)
	require.Equal(t, "main", l.Name)

	s, err = storageloc.Resolve([]string{"only=file:///o"}, "", false)
	require.NoError(t, err)
	require.True(t, s.Default().Default)

	for spec, want := range map[string]string{
		"a=file:///a\nb=file:///b":                 "mark one",
		"a=file:///a,default\nb=file:///b,default": "all marked default",
		"a=file:///a\na=file:///b,default":         "declared twice",
		"a=file:///a,default\nb=file:///a":         "same URL",
		"A=file:///a":                              "lowercase DNS label",
		"a=ftp://x":                                "unsupported storage URL scheme",
		"a=file:///a,writable":                     "unknown option",
		"a":                                        "use NAME=URL",
	} {
		_, err := storageloc.Resolve(splitLines(spec), "", false)
		require.ErrorContains(t, err, want, spec)
	}
	_, err = storageloc.Resolve([]string{"a=s3://AKIA:hunter2@bkt"}, "", false)
	require.ErrorContains(t, err, "never on the command line")
	require.NotContains(t, err.Error(), "hunter2")
	_, err = storageloc.Resolve([]string{"a=file:///a"}, "", true)
	require.ErrorContains(t, err, "exclusive")
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

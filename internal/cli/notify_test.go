package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runNotify runs the CLI in process with a home and extra environment.
func runNotify(t *testing.T, home string, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	all := map[string]string{"LETHE_HOME": home}
	for k, v := range env {
		all[k] = v
	}
	code := Run(context.Background(), args, Streams{
		In: strings.NewReader(""), Out: &out, Err: &errb,
		Getenv: func(k string) string { return all[k] },
	}, nil)
	return code, out.String(), errb.String()
}

func writeSecret(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	require.NoError(t, os.Chmod(p, mode))
	return p
}

var whsec = "whsec_" + base64.StdEncoding.EncodeToString([]byte("a-webhook-key-of-32-bytes-long!!"))

// TestNotifyWebhookNeedsItsOwnOwnerOnlySecretFile: each --notify-webhook
// names its own secret file (whsec_, mode 0600); anything else is one line
// and exit 2, before anything is opened, and no error shows a credential
// of the URL.
func TestNotifyWebhookNeedsItsOwnOwnerOnlySecretFile(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	good := writeSecret(t, dir, "good.whsec", whsec+"\n", 0o600)
	good2 := writeSecret(t, dir, "good2.whsec", whsec+"\n", 0o400)
	open := writeSecret(t, dir, "open.whsec", whsec+"\n", 0o644)
	plain := writeSecret(t, dir, "plain.whsec", "a long random string\n", 0o600)
	const u = "https://lethe:S3cr3t@hooks.example/lethe?token=S3cr3t"
	for _, tc := range []struct {
		webhooks []string
		want     string
	}{
		{[]string{u}, "needs a secret"},
		{[]string{u + ",secret-file=" + open}, "mode 0644 is readable or writable by group or others"},
		{[]string{u + ",secret-file=" + plain}, "want whsec_"},
		{[]string{u + ",secret-file=" + filepath.Join(dir, "missing")}, "no such file"},
		{[]string{u + ",secret-file=" + good, "https://hooks.example/lethe?token=other,secret-file=" + good2}, "given twice"},
		{[]string{"ftp://hooks.example/x,secret-file=" + good}, "use an http:// or https:// URL"},
	} {
		args := []string{"retry", "list"}
		for _, w := range tc.webhooks {
			args = append(args, "--notify-webhook", w)
		}
		code, _, stderr := runNotify(t, home, nil, args...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.webhooks, stderr)
		require.Contains(t, stderr, tc.want, "%v", tc.webhooks)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1-strings.Count(stderr, "--help"), "one line: %q", stderr)
		require.NotContains(t, stderr, "S3cr3t")
		_, err := os.Stat(filepath.Join(home, "lethe.db"))
		require.ErrorIs(t, err, os.ErrNotExist, "nothing opened: %v %s", tc.webhooks, stderr)
	}

	// Accepted: flags, the environment (commas inside a webhook are
	// joined back) and the config file.
	code, _, stderr := runNotify(t, home, nil, "retry", "list",
		"--notify-webhook", u+",secret-file="+good, "--notify-webhook", "https://b.example/x,secret-file="+good2)
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stderr)
	code, _, stderr = runNotify(t, home, map[string]string{"LETHE_NOTIFY_WEBHOOKS": u + ",secret-file=" + good + ",https://b.example/x,secret-file=" + good2},
		"retry", "list")
	require.Equal(t, 0, code, stderr)
	cfg := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("notify-webhook:\n  - "+u+",secret-file="+good+"\n  - https://b.example/x,secret-file="+open+"\n"), 0o600))
	code, _, stderr = runNotify(t, home, map[string]string{"LETHE_CONFIG": cfg}, "retry", "list")
	require.Equal(t, exitUsage, code, "the config file's second webhook has an open secret")
	require.Contains(t, stderr, "readable or writable by group or others")
}

// TestOldSharedSecretServesOneWebhookWithAWarning: --notify-secret-file
// and LETHE_NOTIFY_SECRET still sign a single webhook given without its
// own secret-file, with a deprecation warning; never two (each receiver
// could forge to the other), and never from a file others can read.
func TestOldSharedSecretServesOneWebhookWithAWarning(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	legacy := writeSecret(t, dir, "shared", "a long random string\n", 0o600)
	open := writeSecret(t, dir, "shared-open", "a long random string\n", 0o666)

	code, _, stderr := runNotify(t, home, nil, "retry", "list", "--notify-secret-file", legacy, "--notify-webhook", "https://a.example/x")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "--notify-secret-file is deprecated")
	code, _, stderr = runNotify(t, home, map[string]string{"LETHE_NOTIFY_SECRET": "a long random string", "LETHE_NOTIFY_WEBHOOKS": "https://a.example/x"}, "retry", "list")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "LETHE_NOTIFY_SECRET is deprecated")

	code, _, stderr = runNotify(t, home, nil, "retry", "list", "--notify-secret-file", legacy,
		"--notify-webhook", "https://a.example/x", "--notify-webhook", "https://b.example/y")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "serves a single webhook only")
	code, _, stderr = runNotify(t, home, nil, "retry", "list", "--notify-secret-file", open, "--notify-webhook", "https://a.example/x")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "mode 0666 is readable or writable by group or others")
}

package e2e

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/blobstore/s3test"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

// s3Location is a blobstore URL for the test bucket of srv, without
// credentials, and the store to write to it (with them).
func s3Location(t *testing.T, srv *s3test.Server) (string, blobstore.Store) {
	t.Helper()
	q := url.Values{}
	q.Set("endpoint", srv.Endpoint)
	q.Set("region", s3test.Region)
	q.Set("use_path_style", "true")
	bare := (&url.URL{Scheme: "s3", Host: s3test.Bucket, RawQuery: q.Encode()}).String()
	bl, err := blobstore.Open(t.Context(), srv.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = bl.Close() })
	return bare, bl
}

// TestLocationsWithTheirOwnCredentialsFile is issue 24 point 1: two S3
// locations (two versitygw servers) whose credentials differ, each given
// in its own credentials-file (mode 0600), none in the environment: both
// are Available, both are synced, and a backup of each is deleted from
// its own bucket. Swapped credentials make a location Unavailable; a
// credentials file its group can read is refused with one line (exit 2);
// no output holds a secret.
func TestLocationsWithTheirOwnCredentialsFile(t *testing.T) {
	t.Parallel()
	const keyA, secretA = "lethe-key-a", "secret-of-a/+1"
	const keyB, secretB = "lethe-key-b", "secret-of-b/+2"
	urlA, blA := s3Location(t, s3test.StartServerWith(t, keyA, secretA))
	urlB, blB := s3Location(t, s3test.StartServerWith(t, keyB, secretB))
	for bl, name := range map[blobstore.Store]string{blA: "in-a", blB: "in-b"} {
		files := velerotest.Backup(name)
		for _, k := range files.Keys() {
			require.NoError(t, bl.Put(t.Context(), k, bytes.NewReader(files[k])))
		}
	}

	e := newEnv(t, pluginNoop)
	credentials := func(name, key, secret string) string {
		p := filepath.Join(e.dir, name)
		require.NoError(t, os.WriteFile(p, []byte("[default]\naws_access_key_id = "+key+"\naws_secret_access_key = "+secret+"\n"), 0o600))
		return p
	}
	credA, credB := credentials("cred-a", keyA, secretA), credentials("cred-b", keyB, secretB)
	e.extra = append(e.extra, "LETHE_LOCATIONS=a="+urlA+",default,credentials-file="+credA+"\nb="+urlB+",credentials-file="+credB)
	var results []result
	keep := func(r result) result { results = append(results, r); return r }

	ls := e.locations()
	require.Equal(t, "Available", ls["a"].Phase, "%+v", ls["a"])
	require.Equal(t, "Available", ls["b"].Phase, "%+v", ls["b"])
	r := keep(e.ok("location", "get", "b", "-o", "json"))
	require.Contains(t, r.stdout, `"credentialsFile": "`+credB+`"`)

	r = keep(e.ok("backup", "sync"))
	require.Regexp(t, `in-a\s+a\s+imported`, r.stdout)
	require.Regexp(t, `in-b\s+b\s+imported`, r.stdout)
	keep(e.ok("backup", "delete", "in-b", "--yes"))
	e.requirePurged("in-b")
	_, err := blB.Stat(t.Context(), "backups/in-b/velero-backup.json")
	require.ErrorIs(t, err, blobstore.ErrNotFound, "purged from b's own bucket")
	keep(e.ok("backup", "delete", "in-a", "--yes"))
	_, err = blA.Stat(t.Context(), "backups/in-a/velero-backup.json")
	require.ErrorIs(t, err, blobstore.ErrNotFound)

	// b given a's credentials: Unavailable, with the error.
	r = keep(e.ok("location", "list", "-o", "json", "--location", "a="+urlA+",default,credentials-file="+credA, "--location", "b="+urlB+",credentials-file="+credA))
	require.Contains(t, r.stdout, `"phase": "Unavailable"`)

	// Readable by its group: refused before it is read, one line, exit 2.
	require.NoError(t, os.Chmod(credB, 0o640))
	r = keep(e.run("location", "list"))
	require.Equal(t, 2, r.code, "%s", r)
	requireOneErrorLine(t, r, "--location b: credentials-file "+credB+": mode 0640 is readable or writable by group or others; run chmod 600 "+credB)

	for _, r := range results {
		for _, s := range []string{secretA, secretB, url.QueryEscape(secretA), url.PathEscape(secretB)} {
			require.NotContains(t, r.stdout+r.stderr, s, "%s", r.args)
		}
	}
}

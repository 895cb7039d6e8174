package blobstore_test

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/blobstore/blobstoretest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func fileURL(dir string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()
}

func TestFileConformance(t *testing.T) {
	blobstoretest.Run(t, func(t *testing.T) string {
		// A directory that does not exist yet: Open must create it.
		return fileURL(filepath.Join(t.TempDir(), "store"))
	})
}

func TestFileNoSidecarsOrTempFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := blobstore.Open(t.Context(), fileURL(dir))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })

	require.NoError(t, s.Put(t.Context(), "a/b.tar.gz", strings.NewReader("x")))
	var files []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	}))
	require.Equal(t, []string{"a/b.tar.gz"}, files)

	fi, err := os.Stat(filepath.Join(dir, "a", "b.tar.gz"))
	require.NoError(t, err)
	require.Zero(t, fi.Mode().Perm()&0o077, "object readable by others: %v", fi.Mode())
}

// TestFileDeleteLeavesNoEmptyFolders: deleting an object removes the
// folders it leaves empty (a purged backup leaves no backups/NAME/ behind),
// but not a folder that still holds something, nor the store's root.
func TestFileDeleteLeavesNoEmptyFolders(t *testing.T) {
	dir := t.TempDir()
	s, err := blobstore.Open(t.Context(), fileURL(dir))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })

	for _, k := range []string{"backups/a/a.tar.gz", "backups/b/b.tar.gz", "backups/b/b-logs.gz"} {
		require.NoError(t, s.Put(t.Context(), k, strings.NewReader("x")))
	}
	require.NoError(t, s.Delete(t.Context(), "backups/a/a.tar.gz"))
	require.NoDirExists(t, filepath.Join(dir, "backups", "a"))
	require.DirExists(t, filepath.Join(dir, "backups"), "backups/b still holds objects")

	require.NoError(t, s.Delete(t.Context(), "backups/b/b.tar.gz"))
	require.FileExists(t, filepath.Join(dir, "backups", "b", "b-logs.gz"))
	require.NoError(t, s.Delete(t.Context(), "backups/b/b-logs.gz"))
	require.NoDirExists(t, filepath.Join(dir, "backups"))
	require.DirExists(t, dir, "the store's root stays")
}

func TestFileListHidesStrandedTempFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := blobstore.Open(t.Context(), fileURL(dir))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })

	require.NoError(t, s.Put(t.Context(), "b/k", strings.NewReader("x")))
	// What a process killed during a Put leaves behind.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b", "k2.18a2b3c4d5e6f.tmp"), []byte("partial"), 0o600))
	attrs, err := s.List(t.Context(), "")
	require.NoError(t, err)
	require.Len(t, attrs, 1)
	require.Equal(t, "b/k", attrs[0].Key)
}

func TestOpenRejectsBadURLs(t *testing.T) {
	tests := []struct {
		url, wantErr string
	}{
		{"", "no scheme"},
		{"/abs/dir", "no scheme"},
		{"gs://bucket", `unsupported storage URL scheme "gs"`},
		{"file://relative/dir", `has host "relative"`},
		{"file:relative", "must be file:///absolute/dir"},
		{"file:///dir?x=1", "must not have a query"},
		{"file://user:pw@/dir", "must not carry user info"},
		{"s3://", "want s3://bucket/prefix"},
		{"s3:///prefix", "want s3://bucket/prefix"},
		{"s3://bucket/a/../b?region=r", `".." segment`},
		{"s3://bucket?region=r&bogus=1", `unknown query parameter "bogus"`},
		{"s3://bucket?region=r&region=s", `"region" given 2 times`},
		{"s3://bucket?region=r&use_path_style=maybe", "not a boolean"},
		{"s3://bucket?region=r&endpoint=ftp://host", "must be an http:// or https:// URL"},
		{"s3://bucket?region=r&endpoint=127.0.0.1:7070", "must be an http:// or https:// URL"},
		{"s3://onlykey@bucket?region=r", "user info must be KEY:SECRET"},
		{"s3://AKID:s3cr3t@bucket/p?region=r&bogus=1", "unknown query parameter"},
		{"%zz://x", "invalid storage URL"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			s, err := blobstore.Open(t.Context(), tt.url)
			require.Error(t, err)
			require.Nil(t, s)
			require.Contains(t, err.Error(), tt.wantErr)
			require.NotContains(t, err.Error(), "\n")
			require.NotContains(t, err.Error(), "s3cr3t")
		})
	}
}

func TestOpenS3RedactsCredentials(t *testing.T) {
	// Opening does not contact the server.
	s, err := blobstore.Open(t.Context(), "s3://AKID:s3cr3t%2Fx@bucket/some/prefix/?endpoint=http://127.0.0.1:1&region=us-east-1&use_path_style=true")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.Equal(t, "s3://bucket/some/prefix?endpoint=http://127.0.0.1:1&region=us-east-1&use_path_style=true", s.URL())
}

func TestOpenConfigCredentials(t *testing.T) {
	_, err := blobstore.OpenConfig(t.Context(), "s3://bucket?region=r", &blobstore.Config{AccessKeyID: "only"})
	require.ErrorContains(t, err, "must be set together")

	s, err := blobstore.OpenConfig(t.Context(), "s3://bucket?region=r", &blobstore.Config{AccessKeyID: "a", SecretAccessKey: "b"})
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

func TestOpenFileURLForms(t *testing.T) {
	dir := t.TempDir()
	for _, raw := range []string{
		fileURL(dir),
		"file://localhost" + filepath.ToSlash(dir),
		fileURL(dir) + "/sub/../",
	} {
		s, err := blobstore.Open(t.Context(), raw)
		require.NoError(t, err, raw)
		require.Equal(t, fileURL(dir), s.URL())
		require.NoError(t, s.Close())
	}
}

func TestRedactURL(t *testing.T) {
	const secret = "S3cr3t"
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"file:///var/lib/lethe/storage", "file:///var/lib/lethe/storage"},
		{"s3://bucket/prefix?region=eu-west-1&use_path_style=true", "s3://bucket/prefix?region=eu-west-1&use_path_style=true"},
		{"s3://bucket?endpoint=http://127.0.0.1:7070&region=r", "s3://bucket?endpoint=http://127.0.0.1:7070&region=r"},
		{"s3://AKID:S3cr3t@bucket/prefix?region=r", "s3://bucket/prefix?region=r"},
		{"s3://AKID:S3cr3t%2Fx@bucket", "s3://bucket"},
		{"s3://bucket?region=r&secret_access_key=S3cr3t", "s3://bucket?region=r&secret_access_key=xxxxx"},
		{"s3://bucket?X-Amz-Signature=S3cr3t&X-Amz-Security-Token=S3cr3t", "s3://bucket?X-Amz-Signature=xxxxx&X-Amz-Security-Token=xxxxx"},
		{"s3://bucket?Region=S3cr3t", "s3://bucket?Region=xxxxx"},
		{"s3://bucket?endpoint=http://AKID:S3cr3t@minio:9000&region=r", "s3://bucket?endpoint=http%3A%2F%2Fminio%3A9000&region=r"},
		{"s3://bucket?endpoint=http%3A%2F%2Fminio%3A9000%2F%3Ftoken%3DS3cr3t", "s3://bucket?endpoint=http%3A%2F%2Fminio%3A9000%2F"},
		{"s3://bucket?endpoint=%zzS3cr3t", "s3://bucket?endpoint=xxxxx"},
		{"s3://bucket#S3cr3t", "s3://bucket#xxxxx"},
		{"AKID:S3cr3t@bucket", "xxxxx@bucket"},
		{"s3://AKID:S3cr3t%zz@bucket", "s3:(rest hidden: it does not parse)"},
	} {
		got := blobstore.RedactURL(tc.in)
		require.Equal(t, tc.want, got, "RedactURL(%q)", tc.in)
		require.NotContains(t, got, secret, "RedactURL(%q)", tc.in)
	}
}

func TestOpenErrorsHideSecrets(t *testing.T) {
	for _, u := range []string{
		"s3://bucket?region=r&secret_access_key=S3cr3t",
		"s3://AKID:S3cr3t@bucket?region=r&session_token=S3cr3t",
		"s3://bucket?region=r&endpoint=ftp://AKID:S3cr3t@host",
		"s3://AKID:S3cr3t@bucket?region=r#frag",
		"s3://AKID:S3cr3t%zz@bucket",
		"gs://AKID:S3cr3t@bucket?token=S3cr3t",
		"file://AKID:S3cr3t@/dir",
		"AKID:S3cr3t@bucket",
	} {
		_, err := blobstore.Open(t.Context(), u)
		require.Error(t, err, u)
		require.NotContains(t, err.Error(), "S3cr3t", u)
	}
}

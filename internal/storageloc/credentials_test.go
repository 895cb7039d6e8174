package storageloc_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/storageloc"
)

// TestCredentialsFile is issue 24.1: a location's credentials-file is an
// AWS credentials file that only its owner may read or write (ssh's rule
// for private keys); it is read at Resolve, for s3:// locations only, and
// no error repeats the secret.
func TestCredentialsFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	good := write("good", "# Velero's credentials-velero\n[default]\naws_access_key_id = AKIA1\naws_secret_access_key=s3cr3t/+x\n", 0o600)
	only := write("only", "[backup]\naws_access_key_id=AKIA2\naws_secret_access_key=other\n", 0o400)
	open := write("open", "[default]\naws_access_key_id=AKIA3\naws_secret_access_key=leaked\n", 0o640)

	s, err := storageloc.Resolve([]string{"a=s3://bkt?region=r,default,credentials-file=" + good, "b=s3://bkt2?region=r,credentials-file=" + only}, "", false)
	require.NoError(t, err)
	require.Equal(t, good, s[0].CredentialsFile)
	require.Equal(t, &storageloc.Credentials{AccessKeyID: "AKIA1", SecretAccessKey: "s3cr3t/+x"}, s[0].Credentials)
	require.Equal(t, &storageloc.Credentials{AccessKeyID: "AKIA2", SecretAccessKey: "other"}, s[1].Credentials)

	for spec, want := range map[string]string{
		"a=s3://bkt,credentials-file=" + open:                                                                        "mode 0640 is readable or writable by group or others",
		"a=s3://bkt,credentials-file=" + filepath.Join(dir, "none"):                                                  "no such file",
		"a=s3://bkt,credentials-file=" + write("nokey", "[default]\naws_secret_access_key=x\n", 0o600):               "needs both",
		"a=s3://bkt,credentials-file=" + write("two", "[p]\naws_access_key_id=x\n[q]\naws_access_key_id=y\n", 0o600): "no [default] profile",
		"a=s3://bkt,credentials-file=" + write("junk", "aws_access_key_id\n", 0o600):                                 "not an AWS credentials file",
		"a=file:///a,credentials-file=" + good:                                                                       "for an s3:// location",
		"a=s3://bkt,credentials-file=":                                                                               "needs a FILE",
	} {
		_, err := storageloc.Resolve([]string{spec}, "", false)
		require.ErrorContains(t, err, want, spec)
		require.NotContains(t, err.Error(), "\n")
		require.NotContains(t, err.Error(), "leaked")
	}
}

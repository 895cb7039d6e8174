package backup

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateNewName(t *testing.T) {
	require.NoError(t, ValidateNewName(strings.Repeat("a", MaxNameLength)))
	require.NoError(t, ValidateNewName("nightly-0412.db"))
	for _, bad := range []string{"", strings.Repeat("a", MaxNameLength+1), strings.Repeat("a", 253), "Nightly", "-x", "a_b", "../etc"} {
		require.Error(t, ValidateNewName(bad), "%q", bad)
	}
	// An existing backup with a longer name can still be named.
	require.NoError(t, ValidateName(strings.Repeat("a", 200)))
}

func TestValidateLabel(t *testing.T) {
	for _, ok := range [][2]string{{"team", "db"}, {"example.com/tier", "db-1"}, {"a", ""}, {"A_b.c", "X.y_z"}} {
		require.NoError(t, ValidateLabel(ok[0], ok[1]), "%v", ok)
	}
	for _, bad := range [][2]string{{"a b", "c"}, {"", "x"}, {"-a", "x"}, {"Example.com/x", "y"}, {"a/b/c", "x"}, {"team", "d b"}, {"team", "-x"}, {"team", strings.Repeat("v", 64)}, {strings.Repeat("k", 64), "v"}} {
		require.Error(t, ValidateLabel(bad[0], bad[1]), "%v", bad)
	}
}

func TestStorageKeys(t *testing.T) {
	require.Equal(t, "backups/n/n.tar.gz", StorageKey("n"))
	require.Equal(t, "backups/n/n.tar.zst", StorageKeyExt("n", ExtZstd))
	for key, want := range map[string]string{"backups/n/n.tar.gz": "n", "backups/n/n.tar.zst": "n", "backups/n/m.tar.gz": "", "backups/n/n.tar": "", "other/n/n.tar.gz": ""} {
		name, ok := NameFromStorageKey(key)
		require.Equal(t, want != "", ok, key)
		require.Equal(t, want, name, key)
	}
}

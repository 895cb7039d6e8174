package blobstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/blobstore"
)

func TestObjectURLPutsTheKeyBeforeTheQuery(t *testing.T) {
	for loc, want := range map[string]string{
		"file:///var/lib/lethe/storage":                                               "file:///var/lib/lethe/storage/backups/b/b.tar.gz",
		"s3://bucket?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=us-east-1":         "s3://bucket/backups/b/b.tar.gz?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=us-east-1",
		"s3://bucket/prefix/?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=us-east-1": "s3://bucket/prefix/backups/b/b.tar.gz?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=us-east-1",
		"s3://bucket/prefix": "s3://bucket/prefix/backups/b/b.tar.gz",
	} {
		require.Equal(t, want, blobstore.ObjectURL(loc, "backups/b/b.tar.gz"), loc)
	}
}

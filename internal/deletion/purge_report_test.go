package deletion

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
)

// urlStore is a blobstore.Store that only has a URL: purgedOthers reads
// nothing else.
type urlStore struct {
	blobstore.Store
	url string
}

func (s urlStore) URL() string { return s.url }

// TestPurgeReportNamesTheFolderInsideTheLocationURL: the report's folder
// goes in the URL's path, before an S3 location's query, not after it.
func TestPurgeReportNamesTheFolderInsideTheLocationURL(t *testing.T) {
	b := &backup.Backup{}
	b.Spec.StorageKey = "backups/nightly/nightly.tar.gz"
	removed := []string{"backups/nightly/velero-backup.json", b.Spec.StorageKey, "backups/nightly/nightly-logs.gz"}
	for loc, want := range map[string]string{
		"s3://bucket?endpoint=http%3A%2F%2F127.0.0.1%3A7070&use_path_style=true": "2 other files under s3://bucket/backups/nightly/?endpoint=http%3A%2F%2F127.0.0.1%3A7070&use_path_style=true (velero-backup.json first)",
		"file:///srv/bucket": "2 other files under file:///srv/bucket/backups/nightly/ (velero-backup.json first)",
	} {
		assert.Equal(t, []string{want}, purgedOthers(urlStore{url: loc}, b, removed), loc)
	}
}

// TestThePurgeReportSaysVeleroBackupJSONFirstOnlyWhenOneWasRemoved: the
// report says velero-backup.json went first only when the purge removed
// one; a folder without it is reported as other files alone.
func TestThePurgeReportSaysVeleroBackupJSONFirstOnlyWhenOneWasRemoved(t *testing.T) {
	b := &backup.Backup{}
	b.Spec.StorageKey = "backups/nightly/nightly.tar.gz"
	loc := urlStore{url: "file:///srv/bucket"}
	assert.Equal(t, []string{"2 other files under file:///srv/bucket/backups/nightly/"},
		purgedOthers(loc, b, []string{b.Spec.StorageKey, "backups/nightly/nightly-logs.gz", "backups/nightly/nightly-results.gz"}))
	assert.Nil(t, purgedOthers(loc, b, []string{b.Spec.StorageKey}), "the tarball alone")
}

// TestThePlanPromisesOnlyABackupsOwnFolder: a plan says a purge removes
// every other file under the tarball's folder only when that folder is a
// backup's own, backups/<name>/; never for the top of backups/ or a key
// elsewhere in the storage.
func TestThePlanPromisesOnlyABackupsOwnFolder(t *testing.T) {
	for key, want := range map[string]string{
		"backups/nightly/nightly.tar.gz": "every other file under backups/nightly/ (velero-backup.json first, so that Velero's sync cannot bring the backup back)",
		"backups/nightly.tar.gz":         "",
		"keep/nightly.tar.gz":            "",
		"nightly.tar.gz":                 "",
	} {
		b := &backup.Backup{}
		b.Spec.StorageKey = key
		assert.Equal(t, want, planFolder(b), key)
	}
}

package deletion_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/blobstore/s3test"
	"github.com/lethehq/lethe/internal/deletion"
)

// TestOneGETPerDeletionRun counts the requests that reach a real S3
// server (versitygw) through a proxy: a dry run reads the tarball once, and
// so does a deletion, hashing as it streams.
func TestOneGETPerDeletionRun(t *testing.T) {
	p := s3test.NewProxy(t, s3test.StartServer(t))
	e := newEnvWithStorage(t, p.URL)
	e.addBackup("nightly", items(600), archivetest.Options{PreferredVersionCopies: true}, nil)

	p.Reset()
	plan, err := e.del.Plan(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Empty(t, plan.Rejected)
	require.Len(t, p.GETs(), 1, "a dry run reads the tarball once: %q", p.GETs())

	p.Reset()
	rep, err := e.del.Delete(e.ctx, "nightly", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.Equal(t, []string{""}, p.GETs(), "a deletion reads the tarball once")
	e.requirePurged("nightly")
	require.Len(t, e.lines(), 600*2+200)
}

// TestBrokenDownloadResumesOrStopsWithProgressSaved: a connection cut
// mid-stream is resumed with a ranged GET and the deletion completes; a
// download that keeps breaking stops the run with one line naming the
// backup and its storage, progress saved (ErrInterrupted, exit 130 at the
// CLI), and the next run resumes without skipping an item.
func TestBrokenDownloadResumesOrStopsWithProgressSaved(t *testing.T) {
	a, b := blobstore.ResumeAttempts, blobstore.ResumeBackoff
	blobstore.ResumeAttempts, blobstore.ResumeBackoff = 2, time.Millisecond
	t.Cleanup(func() { blobstore.ResumeAttempts, blobstore.ResumeBackoff = a, b })
	p := s3test.NewProxy(t, s3test.StartServer(t))
	e := newEnvWithStorage(t, p.URL)

	e.addBackup("cut", items(3000), archivetest.Options{}, nil)
	p.Reset()
	p.CutNextGETs(20000)
	rep, err := e.del.Delete(e.ctx, "cut", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	gets := p.GETs()
	require.Len(t, gets, 2, "%q", gets)
	require.Regexp(t, `^bytes=20000-\d+$`, gets[1])
	require.Len(t, e.lines(), 3000*2+1000)

	e.addBackup("broken", items(3000), archivetest.Options{}, nil)
	before := len(e.lines())
	p.Reset()
	p.CutNextGETs(40000, 0, 0)
	_, err = e.del.Delete(e.ctx, "broken", deletion.Options{})
	require.ErrorIs(t, err, deletion.ErrInterrupted)
	require.ErrorContains(t, err, "backup broken")
	require.ErrorContains(t, err, "s3://lethe-test/backups/broken/broken.tar.gz?")
	require.ErrorContains(t, err, "progress is saved")
	require.NotContains(t, err.Error(), "\n")
	require.Len(t, p.GETs(), 3, "one GET and two attempts to resume")
	sent := len(e.lines()) - before
	require.Less(t, sent, 3000*2+1000, "the run stopped part way")

	rep, err = e.del.Delete(e.ctx, "broken", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	e.requirePurged("broken")
	seen := map[string]bool{}
	for _, l := range e.lines()[before:] {
		seen[l] = true
	}
	require.Len(t, seen, 3000*2+1000, "every item reached every plugin that selects it")
}

// TestSameSizeImpostorIsCaughtAtTheEndOfThePass: a tarball replaced by an
// object of the same size passes the check before the run (which reads
// nothing), but the digest of the one streaming pass refuses it before
// anything is purged, and the watermark goes back so that the next run
// over the registered tarball skips no item.
func TestSameSizeImpostorIsCaughtAtTheEndOfThePass(t *testing.T) {
	e := newEnv(t)
	var buf bytes.Buffer
	require.NoError(t, archivetest.Write(&buf, items(300), archivetest.Options{}))
	orig := buf.Bytes()
	e.addRawBackup("twin", orig, nil)
	// The same items, with another gzip header mtime: same size, other digest.
	twin := bytes.Clone(orig)
	twin[4] ^= 0xff
	require.NoError(t, e.blobs.Put(e.ctx, backup.StorageKey("twin"), bytes.NewReader(twin)))

	_, err := e.del.Delete(e.ctx, "twin", deletion.Options{})
	require.ErrorIs(t, err, deletion.ErrTarballReplaced)
	require.ErrorContains(t, err, "nothing is purged")
	require.NotContains(t, err.Error(), "\n")
	_, err = e.blobs.Stat(e.ctx, backup.StorageKey("twin"))
	require.NoError(t, err, "nothing purged")
	p, _, err := e.store.LoadProgress(e.ctx, e.backup("twin").Resource.UID)
	require.NoError(t, err)
	require.Zero(t, p.Watermark, "the watermark went back to where the run started")

	require.NoError(t, e.blobs.Put(e.ctx, backup.StorageKey("twin"), bytes.NewReader(orig)))
	rep, err := e.del.Delete(e.ctx, "twin", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	e.requirePurged("twin")
}

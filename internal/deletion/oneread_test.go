package deletion_test

import (
	"bytes"
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/blobstore/s3test"
	"github.com/lethehq/lethe/internal/catalog"
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

// TestSameSizeImpostorIsRefusedBeforeAnyPlugin: a tarball replaced by an
// object of the same size (the same items, another gzip header) has
// another storage identity (an S3 ETag; a file's mtime and inode) than
// the one pinned at registration: it is refused before any plugin sees an
// item, with one line, and nothing changes. The registered bytes put back
// (a new object, so a new identity) are recognised by their sha256, and
// the deletion completes.
func TestSameSizeImpostorIsRefusedBeforeAnyPlugin(t *testing.T) {
	for _, kind := range []string{"file", "s3"} {
		t.Run(kind, func(t *testing.T) {
			storage := ""
			if kind == "s3" {
				storage = s3test.Start(t)
			}
			e := newEnvWithStorage(t, storage)
			orig, twin := twins(t)
			e.addRawBackup("twin", orig, nil)
			require.False(t, e.backup("twin").Spec.StorageVersion.IsZero(), "registration pins the object's identity")
			require.NoError(t, e.blobs.Put(e.ctx, backup.StorageKey("twin"), bytes.NewReader(twin)))

			p, err := e.del.Plan(e.ctx, "twin", deletion.Options{})
			require.NoError(t, err)
			require.Contains(t, p.Rejected, deletion.ErrTarballReplaced.Error(), "a dry run reports it")
			_, err = e.del.Delete(e.ctx, "twin", deletion.Options{})
			require.ErrorIs(t, err, deletion.ErrTarballReplaced)
			require.ErrorContains(t, err, "no plugin runs and nothing changed")
			require.NotContains(t, err.Error(), "\n")
			require.Empty(t, e.lines(), "no plugin saw an item")
			b := e.backup("twin")
			require.Equal(t, catalog.PhaseActive, b.Resource.Phase, "nothing changed")
			c := condition(b.Resource, backup.ConditionTarballReplaced)
			require.NotNil(t, c)
			require.Equal(t, "True", c.Status)

			require.NoError(t, e.blobs.Put(e.ctx, backup.StorageKey("twin"), bytes.NewReader(orig)))
			rep, err := e.del.Delete(e.ctx, "twin", deletion.Options{})
			require.NoError(t, err)
			require.Equal(t, deletion.ResultPurged, rep.Result)
			e.requirePurged("twin")
			require.Len(t, e.lines(), 300*2+100)
		})
	}
}

// twins are two tarballs of the same size and items, with other digests
// (another gzip header mtime).
func twins(t *testing.T) (orig, twin []byte) {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, archivetest.Write(&buf, items(300), archivetest.Options{}))
	orig = buf.Bytes()
	twin = bytes.Clone(orig)
	twin[4] ^= 0xff
	return orig, twin
}

// TestSameSizeImpostorIsCaughtAtTheEndOfThePass: a backup registered
// before Lethe pinned the tarball's identity has only its size checked
// before the run; the digest of the one streaming pass is the second line
// of defence: it refuses a same-size impostor before anything is purged,
// and the watermark goes back so that the next run over the registered
// tarball skips no item.
func TestSameSizeImpostorIsCaughtAtTheEndOfThePass(t *testing.T) {
	e := newEnv(t)
	orig, twin := twins(t)
	e.addRawBackup("twin", orig, nil)
	unpin(t, e, "twin")
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

// unpin makes the backup name look registered before Lethe recorded the
// tarball's storage identity.
func unpin(t *testing.T, e *env, name string) {
	t.Helper()
	b := e.backup(name)
	b.Spec.StorageVersion = blobstore.Version{}
	require.NoError(t, b.Encode())
	_, err := e.store.Update(e.ctx, b.Resource)
	require.NoError(t, err)
}

// swapBeforeGET is the real storage, but once armed, the first pinned
// open of key first puts swap at key: a deterministic stand-in for another
// writer replacing the tarball after the check before the run and before
// the run's GET (a real race cannot be timed in a test).
type swapBeforeGET struct {
	blobstore.Store
	key   string
	swap  []byte
	armed atomic.Bool
}

func (s *swapBeforeGET) OpenVersion(ctx context.Context, key string, v blobstore.Version) (io.ReadCloser, error) {
	if key == s.key && s.armed.CompareAndSwap(true, false) {
		if err := s.Store.Put(ctx, key, bytes.NewReader(s.swap)); err != nil {
			return nil, err
		}
	}
	return s.Store.OpenVersion(ctx, key, v)
}

// TestSwapBetweenCheckAndGETIsRefusedBeforeAnyPlugin: a same-size
// impostor put in place after the check before the run has looked, and
// before the run's one GET, is refused by the GET itself, pinned to the
// identity recorded at registration (S3: If-Match on the ETag; file://:
// the opened file's mtime and inode): no plugin sees an item, nothing is
// purged, and the backup waits for an operator (TarballReplaced).
func TestSwapBetweenCheckAndGETIsRefusedBeforeAnyPlugin(t *testing.T) {
	for _, kind := range []string{"file", "s3"} {
		t.Run(kind, func(t *testing.T) {
			storage := ""
			if kind == "s3" {
				storage = s3test.Start(t)
			}
			orig, twin := twins(t)
			var swapper *swapBeforeGET
			e := newEnvWithHook(t, storage, func(c *deletion.Config) {
				swapper = &swapBeforeGET{Store: c.Blobs, key: backup.StorageKey("twin"), swap: twin}
				c.Locations = blobstore.NewLocations(swapper, nil)
			})
			e.addRawBackup("twin", orig, nil)
			swapper.armed.Store(true)

			_, err := e.del.Delete(e.ctx, "twin", deletion.Options{})
			require.ErrorIs(t, err, deletion.ErrTarballReplaced)
			require.ErrorIs(t, err, blobstore.ErrVersionMismatch)
			require.ErrorContains(t, err, "no plugin runs")
			require.NotContains(t, err.Error(), "\n")
			require.False(t, swapper.armed.Load(), "the swap happened")
			require.Empty(t, e.lines(), "no plugin saw an item of the impostor")
			_, err = e.blobs.Stat(e.ctx, backup.StorageKey("twin"))
			require.NoError(t, err, "nothing purged")
			c := condition(e.backup("twin").Resource, backup.ConditionTarballReplaced)
			require.NotNil(t, c)
			require.Equal(t, "True", c.Status)
		})
	}
}

package deletion_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/blobstore/s3test"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/retry"
)

func (e *env) backup(name string) *backup.Backup {
	e.t.Helper()
	r, err := e.store.Get(e.ctx, backup.Key(name))
	require.NoError(e.t, err)
	b, err := backup.FromResource(r)
	require.NoError(e.t, err)
	return b
}

func condition(r *catalog.Resource, typ string) *catalog.Condition {
	for i := range r.Conditions {
		if r.Conditions[i].Type == typ {
			return &r.Conditions[i]
		}
	}
	return nil
}

func tarball(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, archivetest.Write(&buf, items(n), archivetest.Options{}))
	return buf.Bytes()
}

// TestReplacedTarballIsRefusedBeforeAnyPlugin: a valid 1-item tarball put
// over a 3-item backup's key is refused, naming both digests, before any
// plugin runs, both before the deletion starts and in the middle of it;
// only the abandon path (ForcePurge) gets past it, and it counts the
// backup's own items, not the impostor's. On file:// and on a real S3
// server.
func TestReplacedTarballIsRefusedBeforeAnyPlugin(t *testing.T) {
	for _, kind := range []string{"file", "s3"} {
		t.Run(kind, func(t *testing.T) {
			storage := ""
			if kind == "s3" {
				storage = s3test.Start(t)
			}
			e := newEnvWithStorage(t, storage)
			one := tarball(t, 1)
			sum := sha256.Sum256(one)
			found := hex.EncodeToString(sum[:])

			// Before the deletion starts.
			e.addBackup("three", items(3), archivetest.Options{}, nil)
			recorded := e.backup("three").Spec.Digest
			require.NoError(t, e.blobs.Put(e.ctx, backup.StorageKey("three"), bytes.NewReader(one)))
			_, err := e.del.Delete(e.ctx, "three", deletion.Options{Force: true})
			require.ErrorIs(t, err, deletion.ErrTarballReplaced)
			require.ErrorContains(t, err, "sha256 "+recorded)
			require.ErrorContains(t, err, "sha256 "+found)
			require.NotContains(t, err.Error(), "\n")
			b := e.backup("three")
			require.Equal(t, catalog.PhaseActive, b.Resource.Phase, "nothing changed")
			c := condition(b.Resource, backup.ConditionTarballReplaced)
			require.NotNil(t, c)
			require.Equal(t, "True", c.Status)
			require.Empty(t, e.lines(), "no plugin ran")
			p, err := e.del.Plan(e.ctx, "three", deletion.Options{})
			require.NoError(t, err)
			require.Contains(t, p.Rejected, found)

			// In the middle of a deletion: a run left one item failed.
			e.addBackup("four", items(4), archivetest.Options{}, nil)
			require.NoError(t, os.WriteFile(filepath.Join(e.blockDir, "item-1.fail"), nil, 0o600))
			rep, err := e.del.Delete(e.ctx, "four", deletion.Options{})
			require.NoError(t, err)
			require.Equal(t, deletion.ResultIncomplete, rep.Result)
			before := len(e.lines())
			require.NoError(t, os.Remove(filepath.Join(e.blockDir, "item-1.fail")))
			require.NoError(t, e.blobs.Put(e.ctx, backup.StorageKey("four"), bytes.NewReader(one)))
			_, err = e.del.Delete(e.ctx, "four", deletion.Options{})
			require.ErrorIs(t, err, deletion.ErrTarballReplaced)
			require.Len(t, e.lines(), before, "no plugin ran on the impostor's items")
			stuck, _, err := e.del.Stuck(e.ctx, "four")
			require.NoError(t, err)
			require.True(t, stuck)

			// The abandon path: purged without any plugin, with the
			// backup's own items counted.
			rep, err = e.del.Delete(e.ctx, "three", deletion.Options{Force: true, ForcePurge: true})
			require.NoError(t, err)
			require.Equal(t, deletion.ResultPurged, rep.Result)
			require.Equal(t, "replaced", rep.TarballProblem)
			require.Equal(t, 3, rep.UnsettledCount)
			require.EqualValues(t, 3, rep.NotSent)
			e.requirePurged("three")
			rep, err = e.del.Delete(e.ctx, "four", deletion.Options{Force: true, ForcePurge: true})
			require.NoError(t, err)
			require.Equal(t, 1, rep.UnsettledCount, "item-1 failed; the other 3 were done")
			require.Zero(t, rep.NotSent)
			e.requirePurged("four")
			require.Len(t, e.lines(), before)
		})
	}
}

// TestForcePurgeCountsEveryItemNotSettled is the 42,004-of-200,000 case: a
// deletion interrupted part way, then its tarball vanishes; the forced
// purge counts, in the report, the plan and the audit, every item not
// settled: the failed one and every one never sent.
func TestForcePurgeCountsEveryItemNotSettled(t *testing.T) {
	const total = 10000
	e := newEnv(t)
	e.addBackup("big", items(total), archivetest.Options{}, nil)
	require.NoError(t, os.WriteFile(filepath.Join(e.blockDir, "item-1.fail"), nil, 0o600))
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	_, err := e.del.Delete(ctx, "big", deletion.Options{Progress: func(p deletion.Progress) {
		if p.Processed >= 512 {
			cancel()
		}
	}})
	require.ErrorContains(t, err, "interrupted")
	prog, rows, err := e.store.LoadProgress(e.ctx, e.backup("big").Resource.UID)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Greater(t, prog.Watermark, int64(1))
	require.Less(t, prog.Watermark, int64(total), "the run must stop part way")
	notSent := total - prog.Watermark
	want := int(total - (prog.Watermark - 1))

	require.NoError(t, e.blobs.Delete(e.ctx, backup.StorageKey("big")))
	p, err := e.del.Plan(e.ctx, "big", deletion.Options{})
	require.NoError(t, err)
	require.Contains(t, p.Rejected, "tarball missing")
	require.Nil(t, p.Abandon)
	p, err = e.del.Plan(e.ctx, "big", deletion.Options{Force: true, ForcePurge: true})
	require.NoError(t, err)
	require.Empty(t, p.Rejected, "the abandon path is not a rejection")
	require.NotNil(t, p.Abandon)
	require.Equal(t, "missing", p.Abandon.Tarball)
	require.EqualValues(t, want, p.Abandon.Items)
	require.EqualValues(t, 1, p.Abandon.FailedOrBlocked)
	require.Equal(t, notSent, p.Abandon.NotSent)

	rep, err := e.del.Delete(catalog.WithActor(e.ctx, "cli:alice"), "big", deletion.Options{Force: true, ForcePurge: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.Equal(t, want, rep.UnsettledCount)
	require.Equal(t, notSent, rep.NotSent)
	require.EqualValues(t, total, rep.TotalItems)
	e.requirePurged("big")
	last := e.lastAudit("big")
	require.Equal(t, "force-purge", last.Action)
	var audit struct {
		Details struct {
			Abandoned, FailedOrBlocked int64
			NeverSent                  int64
			TarballProblem             string
		}
	}
	require.NoError(t, json.Unmarshal(last.Details, &audit))
	details := audit.Details
	require.EqualValues(t, want, details.Abandoned, "%s", last.Details)
	require.EqualValues(t, 1, details.FailedOrBlocked)
	require.Equal(t, notSent, details.NeverSent)
	require.Equal(t, "missing", details.TarballProblem)
}

// TestVanishedTarballIsRaisedOnceAndParked: the deletion of a backup whose
// tarball vanished records TarballMissing once (a second attempt writes
// nothing), parks its work item so that the daemon stops retrying, and
// goes on when the tarball is back and the operator deletes it again.
func TestVanishedTarballIsRaisedOnceAndParked(t *testing.T) {
	e := newEnv(t)
	data := tarball(t, 6)
	e.addRawBackup("gone", data, nil)
	require.NoError(t, os.WriteFile(filepath.Join(e.blockDir, "item-1.fail"), nil, 0o600))
	rep, err := e.del.Delete(e.ctx, "gone", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	require.NoError(t, e.blobs.Delete(e.ctx, backup.StorageKey("gone")))

	_, err = e.del.Delete(e.ctx, "gone", deletion.Options{})
	require.ErrorIs(t, err, deletion.ErrTarballMissing)
	r := e.backup("gone").Resource
	c := condition(r, backup.ConditionTarballMissing)
	require.NotNil(t, c)
	require.Equal(t, "True", c.Status)
	require.Contains(t, c.Message, "backups/gone/gone.tar.gz")
	w, err := e.store.GetWork(e.ctx, deletion.Queue, r.UID)
	require.NoError(t, err)
	require.True(t, w.RunAt.After(e.now.Add(10*365*24*time.Hour)), "parked, not retried: run at %s", w.RunAt)

	_, err = e.del.Delete(e.ctx, "gone", deletion.Options{})
	require.ErrorIs(t, err, deletion.ErrTarballMissing)
	require.Equal(t, r.ResourceVersion, e.backup("gone").Resource.ResourceVersion, "raised once: nothing written again")

	// The tarball is back: an explicit delete clears the condition and
	// finishes.
	require.NoError(t, e.blobs.Put(e.ctx, backup.StorageKey("gone"), bytes.NewReader(data)))
	require.NoError(t, os.Remove(filepath.Join(e.blockDir, "item-1.fail")))
	rep, err = e.del.Delete(e.ctx, "gone", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	e.requirePurged("gone")
}

// TestUnattendedRequestOfAVanishedTarballMovesOn: the daemon's request
// (TTL expiry) of a backup whose tarball is gone does not fail over and
// over: the backup moves to Deleting with TarballMissing, and its work
// is parked on the first run.
func TestUnattendedRequestOfAVanishedTarballMovesOn(t *testing.T) {
	e := newEnv(t)
	e.addBackup("expired", items(3), archivetest.Options{}, nil)
	require.NoError(t, e.blobs.Delete(e.ctx, backup.StorageKey("expired")))
	_, err := e.del.Delete(e.ctx, "expired", deletion.Options{Async: true})
	require.ErrorIs(t, err, deletion.ErrTarballMissing, "an operator's request is refused")
	require.Equal(t, catalog.PhaseActive, e.backup("expired").Resource.Phase)

	rep, err := e.del.Delete(catalog.WithActor(e.ctx, "ttl"), "expired", deletion.Options{Async: true, Unattended: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultQueued, rep.Result)
	r := e.backup("expired").Resource
	require.Equal(t, catalog.PhaseDeleting, r.Phase)
	require.Equal(t, "True", condition(r, backup.ConditionTarballMissing).Status)

	items, err := e.store.Claim(e.ctx, deletion.Queue, e.del.Holder(), time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, items, 1)
	_, err = e.del.RunWork(e.ctx, items[0], deletion.Options{})
	require.ErrorIs(t, err, deletion.ErrTarballMissing)
	items, err = e.store.Claim(e.ctx, deletion.Queue, e.del.Holder(), time.Minute, 1)
	require.NoError(t, err)
	require.Empty(t, items, "the parked deletion is not claimed again")
	require.Empty(t, e.lines())
}

// TestRetryAfterIsClamped: a plugin's retryAfter of zero leaves the retry
// to the backoff; a negative, tiny or huge one is clamped to [1m, 24h] and
// logged once per plugin per run; the work item is never due sooner than
// a minute from now, so no plugin can make the daemon spin.
func TestRetryAfterIsClamped(t *testing.T) {
	var logs bytes.Buffer
	e := newEnvWithLogger(t, hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn}))
	locks := map[string]string{"item-0": "0s", "item-1": "-5m", "item-2": "1000h", "item-3": "1ns", "item-4": "2h"}
	for name, after := range locks {
		require.NoError(t, os.WriteFile(filepath.Join(e.blockDir, name+".lock"), []byte(after), 0o600))
	}
	e.addBackup("locked", items(6), archivetest.Options{}, nil)
	rep, err := e.del.Delete(e.ctx, "locked", deletion.Options{Async: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultQueued, rep.Result)
	work, err := e.store.Claim(e.ctx, deletion.Queue, e.del.Holder(), time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, work, 1)
	rep, err = e.del.RunWork(e.ctx, work[0], deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)

	_, rows, err := e.store.LoadProgress(e.ctx, work[0].Key)
	require.NoError(t, err)
	next := map[string]time.Time{}
	for _, r := range rows {
		require.Equal(t, "blocked", r.Outcome)
		next[r.ItemKey[strings.LastIndex(r.ItemKey, "/")+1:]] = r.NextAttemptAt
	}
	require.Len(t, next, len(locks))
	require.True(t, next["item-0"].IsZero(), "zero: the backoff decides")
	require.Equal(t, e.now.Add(time.Minute), next["item-1"].UTC(), "negative: clamped to 1m")
	require.Equal(t, e.now.Add(24*time.Hour), next["item-2"].UTC(), "huge: clamped to 24h")
	require.Equal(t, e.now.Add(time.Minute), next["item-3"].UTC(), "tiny: clamped to 1m")
	require.Equal(t, e.now.Add(2*time.Hour), next["item-4"].UTC(), "in range: kept")
	require.Equal(t, 1, strings.Count(logs.String(), "retryAfter out of range"), "logged once per plugin per run:\n%s", logs.String())

	// Each item waits in the retry queue, never due before the (clamped)
	// retryAfter its plugin gave, nor sooner than the backoff; the work
	// item is parked, and the queue's collector runs it again.
	queued, err := e.del.Retry().List(e.ctx, catalog.RetryFilter{OwnerUID: work[0].Key})
	require.NoError(t, err)
	require.Len(t, queued, len(locks))
	for _, q := range queued {
		name := q.ItemID[strings.LastIndex(q.ItemID, "/")+1:]
		want := next[name]
		if want.IsZero() {
			want = e.now.Add(retry.BaseDefault - retry.BaseDefault/10) // the backoff, less its jitter
		}
		require.False(t, q.NextAttemptAt.Before(want), "%s: next attempt %s before %s", name, q.NextAttemptAt, want)
		require.False(t, q.NextAttemptAt.After(e.now.Add(24*time.Hour)), "%s: a huge retryAfter is held to 24h: %s", name, q.NextAttemptAt)
	}
	w, err := e.store.GetWork(e.ctx, deletion.Queue, work[0].Key)
	require.NoError(t, err)
	require.True(t, w.RunAt.After(e.now.Add(10*365*24*time.Hour)), "parked: the retry queue decides: %s", w.RunAt)
}

// TestDeletionUsesTheRecordedStorageLocation: a backup registered in one
// storage location is deleted there, whatever storage is the default now,
// as long as that location is configured: one that is not is refused with
// one line, and nothing changes; a backup that recorded none falls back to
// the configured storage; a recorded location that is gone fails with one
// line naming it, and changes nothing.
func TestDeletionUsesTheRecordedStorageLocation(t *testing.T) {
	e := newEnv(t)
	e.addBackup("elsewhere", items(3), archivetest.Options{}, nil)
	e.addBackup("gone-folder", items(3), archivetest.Options{}, nil)
	oldLoc := e.backup("elsewhere").Spec.StorageLocation
	require.Equal(t, e.blobs.URL(), oldLoc)

	unconfigured := e.otherDeleter(t, "file://"+filepath.Join(t.TempDir(), "unconfigured"))
	_, err := unconfigured.Delete(e.ctx, "elsewhere", deletion.Options{})
	require.ErrorIs(t, err, deletion.ErrStorageRefused)
	require.ErrorContains(t, err, "its storage location "+oldLoc+" is not one Lethe is configured with")
	require.NotContains(t, err.Error(), "\n")
	require.Equal(t, catalog.PhaseActive, e.backup("elsewhere").Resource.Phase)

	other := e.otherDeleter(t, "file://"+filepath.Join(t.TempDir(), "other"), oldLoc)
	rep, err := other.Delete(e.ctx, "elsewhere", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.Contains(t, strings.Join(rep.Purged, " "), oldLoc+"/backups/elsewhere/elsewhere.tar.gz")
	e.requirePurged("elsewhere")

	// A backup registered before locations were recorded: the configured
	// storage.
	e.addBackup("legacy", items(3), archivetest.Options{}, nil)
	b := e.backup("legacy")
	b.Spec.StorageLocation = ""
	require.NoError(t, b.Encode())
	_, err = e.store.Update(e.ctx, b.Resource)
	require.NoError(t, err)
	_, err = other.Delete(e.ctx, "legacy", deletion.Options{})
	require.ErrorIs(t, err, deletion.ErrTarballMissing, "looked for in the configured storage")
	require.ErrorContains(t, err, "/other/backups/legacy/")

	// The recorded folder is gone.
	dir := strings.TrimPrefix(oldLoc, "file://")
	require.NoError(t, os.RemoveAll(dir))
	_, err = other.Delete(e.ctx, "gone-folder", deletion.Options{})
	require.ErrorIs(t, err, blobstore.ErrUnavailable)
	require.ErrorContains(t, err, "storage location "+oldLoc+" is unavailable: the folder does not exist")
	require.NotContains(t, err.Error(), "\n")
	require.NoDirExists(t, dir, "a recorded folder that is gone is not created again")
	require.Equal(t, catalog.PhaseActive, e.backup("gone-folder").Resource.Phase)
}

// TestRecordedS3LocationNeedsItsCredentials: a backup registered in an S3
// bucket, deleted by a deleter configured with file storage: without
// credentials in the environment it fails with one line naming the bucket
// (no secret); with them it is deleted from the bucket.
func TestRecordedS3LocationNeedsItsCredentials(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	e := newEnvWithStorage(t, s3test.Start(t))
	e.addBackup("in-s3", items(3), archivetest.Options{}, nil)
	loc := e.backup("in-s3").Spec.StorageLocation
	require.True(t, strings.HasPrefix(loc, "s3://"+s3test.Bucket), loc)
	require.NotContains(t, loc, s3test.AccessKey)

	other := e.otherDeleter(t, "file://"+filepath.Join(t.TempDir(), "other"), loc)
	_, err := other.Delete(e.ctx, "in-s3", deletion.Options{})
	require.ErrorIs(t, err, blobstore.ErrUnavailable)
	require.ErrorContains(t, err, "storage location s3://"+s3test.Bucket)
	require.ErrorContains(t, err, "is unavailable: no credentials for it: give it a credentials-file, or set AWS_ACCESS_KEY_ID")
	require.NotContains(t, err.Error(), s3test.SecretKey)
	require.NotContains(t, err.Error(), "\n")
	require.Equal(t, catalog.PhaseActive, e.backup("in-s3").Resource.Phase)

	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	other = e.otherDeleter(t, "file://"+filepath.Join(t.TempDir(), "other2"), loc)
	rep, err := other.Delete(e.ctx, "in-s3", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	e.requirePurged("in-s3")
}

// otherDeleter is a Deleter on the same catalog and plugins, configured
// with another storage URL as its default, and the locations declared.
func (e *env) otherDeleter(t *testing.T, storageURL string, declared ...string) *deletion.Deleter {
	t.Helper()
	bl, err := blobstore.Open(e.ctx, storageURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = bl.Close() })
	locs := blobstore.NewLocations(bl, nil)
	for _, l := range declared {
		locs.Declare(l)
	}
	t.Cleanup(func() { _ = locs.Close() })
	d, err := deletion.New(&deletion.Config{Store: e.store, Blobs: bl, Locations: locs, Plugins: deletion.HostPlugins(e.host), Now: e.clock})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

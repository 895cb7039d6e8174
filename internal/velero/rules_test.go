package velero_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/velero"
)

// TestOnlyVelerosFinalPhasesAreFinished: a backup Velero may still be
// writing (any phase before Completed, PartiallyFailed, Failed or
// FailedValidation, or no phase at all) is unfinished, and unfinished
// backups are never deleted (DESIGN §10).
func TestOnlyVelerosFinalPhasesAreFinished(t *testing.T) {
	for _, p := range []string{velero.PhaseCompleted, velero.PhasePartiallyFailed, velero.PhaseFailed, velero.PhaseFailedValidation} {
		require.True(t, velero.Finished(p), p)
	}
	for _, p := range []string{"", velero.PhaseNew, velero.PhaseQueued, velero.PhaseReadyToStart, velero.PhaseInProgress,
		velero.PhaseWaitingForPluginOperations, velero.PhaseWaitingForPluginOperationsPartiallyFailed,
		velero.PhaseFinalizing, velero.PhaseFinalizingPartiallyFailed, velero.PhaseDeleting, "completed", "Unknown"} {
		require.False(t, velero.Finished(p), "%q counts as finished", p)
	}
}

// TestMetadataMayBeExactlyMaxMetadataSize: a velero-backup.json of
// MaxMetadataSize bytes is read; one byte more is refused.
func TestMetadataMayBeExactlyMaxMetadataSize(t *testing.T) {
	doc := `{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"nightly"}}`
	exact := doc + strings.Repeat(" ", velero.MaxMetadataSize-len(doc))
	_, err := velero.ParseBackup([]byte(exact), "nightly")
	require.NoError(t, err)
	_, err = velero.ParseBackup([]byte(exact+" "), "nightly")
	require.ErrorContains(t, err, "larger than")
}

// TestABackupExpiresOnlyWithATTLAndACreationTime: without
// status.expiration, a backup expires at its creation plus its TTL; one
// without a TTL (or a TTL of 0s), or without a creation time, never
// expires by TTL: it is not read as expired at its creation or in year 1.
func TestABackupExpiresOnlyWithATTLAndACreationTime(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	parse := func(spec, meta string) *velero.Backup {
		t.Helper()
		b, err := velero.ParseBackup([]byte(`{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"n"`+meta+`},"spec":{`+spec+`}}`), "n")
		require.NoError(t, err)
		return b
	}
	ts := `,"creationTimestamp":"` + created.Format(time.RFC3339) + `"`
	require.Equal(t, created.Add(time.Hour), parse(`"ttl":"1h0m0s"`, ts).ExpiresAt())
	require.True(t, parse(``, ts).ExpiresAt().IsZero(), "no TTL: never expires")
	zero := parse(`"ttl":"0s"`, ts)
	ttl, err := zero.TTL()
	require.NoError(t, err, "a TTL of 0s is a duration, not a negative one")
	require.Zero(t, ttl)
	require.True(t, zero.ExpiresAt().IsZero(), "a TTL of 0s: never expires")
	require.True(t, parse(`"ttl":"1h0m0s"`, ``).ExpiresAt().IsZero(), "no creation time: never expires by TTL")
	_, err = velero.ParseBackup([]byte(`{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"n"},"spec":{"ttl":"-1s"}}`), "n")
	require.ErrorContains(t, err, "spec.ttl is negative")
}

// TestAnObjectThatIsNotABackupIsNamedInTheError: the refusal of a
// velero-backup.json that holds something else says what it holds, and
// says (none) for a field it lacks.
func TestAnObjectThatIsNotABackupIsNamedInTheError(t *testing.T) {
	_, err := velero.ParseBackup([]byte(`{"metadata":{"name":"n"}}`), "n")
	require.EqualError(t, err, `velero-backup.json holds a (none) (none), not a velero.io/v1 Backup`)
	_, err = velero.ParseBackup([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"n"}}`), "n")
	require.EqualError(t, err, `velero-backup.json holds a "v1" "Pod", not a velero.io/v1 Backup`)
}

// TestStatusExpirationWinsOverTheTTL: status.expiration, when Velero set
// it, is when the backup expires, whatever creation plus TTL says.
func TestStatusExpirationWinsOverTheTTL(t *testing.T) {
	b, err := velero.ParseBackup([]byte(`{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"n","creationTimestamp":"2026-01-02T03:04:05Z"},`+
		`"spec":{"ttl":"1h0m0s"},"status":{"expiration":"2026-02-01T00:00:00Z"}}`), "n")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), b.ExpiresAt())
}

// TestPluginsGetTheBackupObjectAsItIsInPhaseDeleting: the Backup object
// a DeleteItemAction plugin receives is velero-backup.json with every
// field kept and status.phase set to Deleting, as Velero's deletion
// controller sends it; a file that is not a JSON object is refused.
func TestPluginsGetTheBackupObjectAsItIsInPhaseDeleting(t *testing.T) {
	for in, want := range map[string]string{
		`{"kind":"Backup","x":{"y":1},"status":{"phase":"Completed","version":1}}`: `{"kind":"Backup","status":{"phase":"Deleting","version":1},"x":{"y":1}}`,
		`{"kind":"Backup"}`:               `{"kind":"Backup","status":{"phase":"Deleting"}}`,
		`{"kind":"Backup","status":null}`: `{"kind":"Backup","status":{"phase":"Deleting"}}`,
	} {
		got, err := velero.DeletingObject([]byte(in))
		require.NoError(t, err, in)
		require.JSONEq(t, want, string(got), in)
	}
	_, err := velero.DeletingObject([]byte(`{"status":"Completed"}`))
	require.ErrorContains(t, err, "status is not an object")
	_, err = velero.DeletingObject([]byte(`[`))
	require.ErrorContains(t, err, "not valid JSON")
}

// TestVolumeSnapshotsMayBeExactlyMaxVolumeSnapshotsSize: a volume
// snapshot list of MaxVolumeSnapshotsSize bytes decompressed is read; one
// byte more is refused as too large.
func TestVolumeSnapshotsMayBeExactlyMaxVolumeSnapshotsSize(t *testing.T) {
	key := velero.VolumeSnapshotsKey("nightly")
	exact := "[" + strings.Repeat(" ", velero.MaxVolumeSnapshotsSize-2) + "]"
	items, err := velero.ParseVolumeSnapshots(gzipped(t, exact), key)
	require.NoError(t, err)
	require.Empty(t, items)
	_, err = velero.ParseVolumeSnapshots(gzipped(t, exact+" "), key)
	require.ErrorContains(t, err, "larger than")
}

// TestVolumeSnapshotsAreTheListBesideTheBackupsOwnTarball: only the
// backup's own tarball (backups/<name>/<name>.tar.gz, or .tar.zst) has a
// volume snapshot list beside it; any other file of the folder has none.
func TestVolumeSnapshotsAreTheListBesideTheBackupsOwnTarball(t *testing.T) {
	want := velero.VolumeSnapshotsKey("nightly")
	require.Equal(t, want, velero.VolumeSnapshotsKeyBeside("backups/nightly/nightly.tar.gz"))
	require.Equal(t, want, velero.VolumeSnapshotsKeyBeside("backups/nightly/nightly.tar.zst"))
	for _, k := range []string{"backups/nightly/nightly-logs.gz", "backups/nightly/other.tar.gz", "backups/nightly/", "nightly.tar.gz"} {
		require.Empty(t, velero.VolumeSnapshotsKeyBeside(k), k)
	}
}

// TestASnapshotWithoutStatusIsSentWithAnEmptyStatusObject: a volume
// snapshot entry without a status (or with status null) reaches plugins
// with status {}, an object as Velero's type has it.
func TestASnapshotWithoutStatusIsSentWithAnEmptyStatusObject(t *testing.T) {
	items, err := velero.ParseVolumeSnapshots(gzipped(t, `[{"spec":{"persistentVolumeName":"a"}},{"spec":{"persistentVolumeName":"b"},"status":null}]`), "k")
	require.NoError(t, err)
	require.Len(t, items, 2)
	for _, it := range items {
		var obj map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(it.Object, &obj))
		require.JSONEq(t, `{}`, string(obj["status"]), it.Name)
	}
}

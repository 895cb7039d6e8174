// Package backup defines the Backup kind: how a backup's spec and status are
// stored in a catalog resource, and where its tarball lives in storage. It
// owns no behaviour beyond (de)serialising; the deletion pipeline, TTL and
// sync build on it.
package backup

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/velero"
)

// Kind is the catalog kind of backups. Backups are cluster-scoped.
const Kind = "Backup"

// Spec is what a backup is: where its tarball is and when it expires.
type Spec struct {
	// StorageKey is the tarball's key in the backup storage.
	StorageKey string `json:"storageKey"`

	// StorageLocation is the storage URL the backup was registered in, as
	// configured, with any password removed. Deletion uses it, whatever
	// --storage says then; empty for backups registered before it was
	// recorded (the configured storage is used).
	StorageLocation string `json:"storageLocation,omitempty"`
	// Location is the name of the storage location (--location) the
	// backup was registered in; empty before locations had names.
	Location string `json:"location,omitempty"`

	// Size is the tarball's size in bytes; Digest its sha256, hex.
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
	// StorageVersion is the stored tarball's identity at registration
	// (s3://: its ETag, and VersionId where the bucket keeps versions;
	// file://: its modification time and inode). A deletion
	// refuses a tarball whose identity differs before any plugin runs,
	// and pins its one read to it. Zero for backups registered before it
	// was recorded: those rely on the size, and the digest checked at the
	// end of the deletion's pass.
	StorageVersion blobstore.Version `json:"storageVersion,omitzero"`
	// Items is the number of unique items in the tarball.
	Items int64 `json:"items"`
	// CopyOnlyItems counts items present only as versioned copies; when
	// zero the deletion pipeline streams without per-item state.
	CopyOnlyItems int64 `json:"copyOnlyItems,omitempty"`
	// TTL is how long the backup lives after creation; zero: forever.
	TTL       Duration   `json:"ttl,omitzero"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// ExpectedPlugins are the plugins installed at registration that
	// select at least one of the backup's items, with how many and a few
	// samples. A deletion refuses to start while one of them is missing.
	// An empty map records that no plugin selected anything; nil (never
	// written) marks a backup registered before Lethe recorded them.
	ExpectedPlugins map[string]ExpectedPlugin `json:"expectedPlugins"`

	// CreatedAt is when the backup was taken, when that is known and
	// differs from when it was registered: a backup imported from a
	// Velero bucket carries Velero's creation time. Nil: the catalog
	// record's creation time.
	CreatedAt *time.Time `json:"createdAt,omitempty"`
	// Velero is what a sync read from the backup's velero-backup.json;
	// nil for a backup that had none.
	Velero *VeleroInfo `json:"velero,omitempty"`
	// VolumeSnapshots is the list of native volume snapshots Velero
	// stored beside the tarball (<name>-volumesnapshots.json.gz), as a
	// sync, or the first deletion run, found it. A deletion refuses a
	// list that differs from it, or is gone, before any plugin runs. Nil
	// when it was never looked at; Count zero (and Key empty) when there
	// was no list.
	VolumeSnapshots *VolumeSnapshotsInfo `json:"volumeSnapshots,omitempty"`
}

// VolumeSnapshotsInfo identifies a backup's list of native volume
// snapshots.
type VolumeSnapshotsInfo struct {
	// Key is the list's storage key; empty when the backup has none.
	Key string `json:"key,omitempty"`
	// Digest is the sha256, hex, of the stored (gzip) file.
	Digest string `json:"digest,omitempty"`
	// Count is the number of snapshots it lists.
	Count int64 `json:"count"`
}

// VeleroInfo is what Lethe keeps of a backup's velero-backup.json.
type VeleroInfo struct {
	// MetadataKey is the velero-backup.json's key in the storage.
	MetadataKey string `json:"metadataKey"`
	// StorageLocation is the name of Velero's BackupStorageLocation
	// (spec.storageLocation), e.g. "default".
	StorageLocation string `json:"storageLocation,omitempty"`
	// Phase is Velero's status.phase, e.g. "Completed".
	Phase string `json:"phase,omitempty"`
	// IncludedNamespaces is spec.includedNamespaces.
	IncludedNamespaces []string `json:"includedNamespaces,omitempty"`
	// UID is the Backup object's metadata.uid in the cluster.
	UID string `json:"uid,omitempty"`
	// Object is the velero-backup.json as the last sync read it, byte
	// for byte: what Velero's DeleteItemAction plugins receive (with
	// status.phase Deleting), even if the file later becomes unreadable.
	// Empty for a backup synced before Lethe recorded it.
	Object json.RawMessage `json:"object,omitempty"`
	// MetadataSize and MetadataModTime are the listing's size and
	// modification time of velero-backup.json when Object was read: a
	// sync reads the file again when they change, or while the phase is
	// unfinished.
	MetadataSize    int64     `json:"metadataSize,omitempty"`
	MetadataModTime time.Time `json:"metadataModTime,omitzero"`
}

// Unfinished reports whether Velero had not finished writing the backup
// when a sync last read its velero-backup.json (see velero.Finished),
// with the phase read. A backup without a velero-backup.json (registered
// by Lethe, or imported from a bare tarball) has no Velero phase and is
// finished.
func (b *Backup) Unfinished() (phase string, unfinished bool) {
	v := b.Spec.Velero
	if v == nil || v.MetadataKey == "" {
		return "", false
	}
	return v.Phase, !velero.Finished(v.Phase)
}

// Created is when the backup was taken: Spec.CreatedAt, else the record's
// creation time.
func (b *Backup) Created() time.Time {
	if b.Spec.CreatedAt != nil {
		return *b.Spec.CreatedAt
	}
	return b.Resource.CreatedAt
}

// ExpectedPlugin is one plugin's share of a backup, recorded at
// registration.
type ExpectedPlugin struct {
	// Items is how many of the backup's items the plugin selects.
	Items int64 `json:"items"`
	// Samples are a few of those items' keys.
	Samples []string `json:"samples,omitempty"`
}

// ExpectedRecorded reports whether the backup's expected plugins were
// recorded at registration (false for backups registered before that).
func (s *Spec) ExpectedRecorded() bool { return s.ExpectedPlugins != nil }

// Status is what the deletion pipeline reports.
type Status struct {
	Deletion *DeletionStatus `json:"deletion,omitempty"`
}

// DeletionStatus summarises a deletion in progress or stopped.
type DeletionStatus struct {
	StartedAt  time.Time                       `json:"startedAt"`
	UpdatedAt  time.Time                       `json:"updatedAt"`
	TotalItems int64                           `json:"totalItems"`
	Processed  int64                           `json:"processed"`
	Counts     map[string]catalog.OutcomeCount `json:"counts,omitempty"`
	// Unsettled counts items waiting on a failed or blocked plugin.
	Unsettled int64  `json:"unsettled"`
	LastError string `json:"lastError,omitempty"`
	// WaitingFor says what holds the backup from its purge once its items
	// are settled: dependents with blockOwnerDeletion (Foreground), block
	// referrers, finalizers (see deletion.Held).
	WaitingFor []string `json:"waitingFor,omitempty"`
}

// Backup is the typed view of a Backup resource.
type Backup struct {
	Resource *catalog.Resource
	Spec     Spec
	Status   Status
}

// FromResource decodes a Backup resource.
func FromResource(r *catalog.Resource) (*Backup, error) {
	if r.Kind != Kind {
		return nil, fmt.Errorf("%s is not a %s", r.Key(), Kind)
	}
	b := &Backup{Resource: r}
	if len(r.Spec) > 0 {
		if err := json.Unmarshal(r.Spec, &b.Spec); err != nil {
			return nil, fmt.Errorf("backup %s: spec: %w", r.Name, err)
		}
	}
	if len(r.Status) > 0 {
		if err := json.Unmarshal(r.Status, &b.Status); err != nil {
			return nil, fmt.Errorf("backup %s: status: %w", r.Name, err)
		}
	}
	return b, nil
}

// Encode writes Spec and Status back into the resource.
func (b *Backup) Encode() error {
	spec, err := json.Marshal(b.Spec)
	if err != nil {
		return err
	}
	status, err := json.Marshal(b.Status)
	if err != nil {
		return err
	}
	b.Resource.Spec, b.Resource.Status = spec, status
	return nil
}

// Name is the backup's name.
func (b *Backup) Name() string { return b.Resource.Name }

// Key returns the catalog key of the backup named name.
func Key(name string) catalog.Key { return catalog.Key{Kind: Kind, Name: name} }

// Tarball file extensions, by compression.
const (
	ExtGzip = ".tar.gz"
	ExtZstd = ".tar.zst"
)

// StorageKey is where a gzip backup tarball lives in storage, in Velero's
// layout: backups/<name>/<name>.tar.gz.
func StorageKey(name string) string { return StorageKeyExt(name, ExtGzip) }

// StorageKeyExt is StorageKey for a tarball with extension ext (ExtGzip
// or ExtZstd): a zstd tarball is stored as backups/<name>/<name>.tar.zst.
func StorageKeyExt(name, ext string) string { return "backups/" + name + "/" + name + ext }

// NameFromStorageKey is the inverse of StorageKeyExt; ok is false for keys
// that are not backup tarballs.
func NameFromStorageKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "backups/")
	if !ok {
		return "", false
	}
	name, file, ok := strings.Cut(rest, "/")
	if !ok || (file != name+ExtGzip && file != name+ExtZstd) || ValidateName(name) != nil {
		return "", false
	}
	return name, true
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// ValidateName checks the name of an existing backup: a DNS subdomain, at
// most 253 chars. New backups must also pass ValidateNewName.
func ValidateName(name string) error {
	if len(name) > 253 {
		return fmt.Errorf("invalid backup name (%d characters): a name has at most 253", len(name))
	}
	if len(name) == 0 || !nameRE.MatchString(name) {
		return fmt.Errorf("invalid backup name %q: use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit", name)
	}
	return nil
}

// DeletionDelay returns the delay from the lethe.io/deletion-delay
// annotation, or def when it is absent.
func DeletionDelay(r *catalog.Resource, def time.Duration) (time.Duration, error) {
	v, ok := r.Annotations[catalog.AnnotationDeletionDelay]
	if !ok {
		return def, nil
	}
	d, err := ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("annotation %s=%q: %w", catalog.AnnotationDeletionDelay, v, err)
	}
	return d, nil
}

// Duration is a time.Duration that marshals as a Go duration string.
type Duration time.Duration

// MarshalJSON writes "1h30m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "1h30m" (or a number of nanoseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return err
		}
		*d = Duration(n)
		return nil
	}
	v, err := ParseDuration(s)
	*d = Duration(v)
	return err
}

// ParseDuration parses a Go duration, plus a "d" suffix for days ("7d",
// "1d12h"). Negative durations are refused.
func ParseDuration(in string) (time.Duration, error) {
	s := strings.TrimSpace(in)
	var total time.Duration
	if i := strings.Index(s, "d"); i > 0 {
		var days int
		if _, err := fmt.Sscanf(s[:i], "%d", &days); err != nil || fmt.Sprint(days) != s[:i] {
			return 0, fmt.Errorf("invalid duration %q (examples: 90s, 15m, 2h, 7d)", in)
		}
		total = time.Duration(days) * 24 * time.Hour
		s = s[i+1:]
		if s == "" {
			return checkNonNegative(total)
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (examples: 90s, 15m, 2h, 7d)", in)
	}
	return checkNonNegative(total + d)
}

func checkNonNegative(d time.Duration) (time.Duration, error) {
	if d < 0 {
		return 0, fmt.Errorf("duration %s is negative", d)
	}
	return d, nil
}

package velero

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lethehq/lethe/internal/termtext"
)

// APIVersion and BackupKind identify a Velero Backup object.
const (
	APIVersion = "velero.io/v1"
	BackupKind = "Backup"
)

// MaxMetadataSize caps the size of a velero-backup.json Lethe reads: a
// real one is a few KiB. A sync keeps the file, byte for byte, in the
// backup's row (and the catalog's change feed), so a folder whose file is
// larger is refused, not imported.
const MaxMetadataSize = 64 << 10

// Backup is the part of a velero.io/v1 Backup object (velero-backup.json)
// that Lethe reads. Field names and JSON tags follow Velero's
// pkg/apis/velero/v1/backup_types.go.
type Backup struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       BackupSpec `json:"spec"`
	Status     BackupStat `json:"status"`
}

// ObjectMeta is the part of Kubernetes' ObjectMeta that Lethe reads.
type ObjectMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	CreationTimestamp *time.Time        `json:"creationTimestamp,omitempty"`
}

// BackupSpec is the part of Velero's BackupSpec that Lethe reads.
type BackupSpec struct {
	IncludedNamespaces []string `json:"includedNamespaces,omitempty"`
	ExcludedNamespaces []string `json:"excludedNamespaces,omitempty"`
	// TTL is a Go duration string ("720h0m0s"), as metav1.Duration
	// marshals it.
	TTL             string `json:"ttl,omitempty"`
	StorageLocation string `json:"storageLocation,omitempty"`
}

// BackupStat is the part of Velero's BackupStatus that Lethe reads.
type BackupStat struct {
	Version             int             `json:"version,omitempty"`
	FormatVersion       string          `json:"formatVersion,omitempty"`
	Expiration          *time.Time      `json:"expiration,omitempty"`
	Phase               string          `json:"phase,omitempty"`
	StartTimestamp      *time.Time      `json:"startTimestamp,omitempty"`
	CompletionTimestamp *time.Time      `json:"completionTimestamp,omitempty"`
	Progress            *BackupProgress `json:"progress,omitempty"`
}

// BackupProgress is Velero's BackupProgress.
type BackupProgress struct {
	TotalItems    int `json:"totalItems,omitempty"`
	ItemsBackedUp int `json:"itemsBackedUp,omitempty"`
}

// ParseBackup reads a velero-backup.json found in the folder of the
// backup named name. It refuses anything that is not a velero.io/v1
// Backup of that name, and a TTL that is not a duration.
func ParseBackup(data []byte, name string) (*Backup, error) {
	if len(data) > MaxMetadataSize {
		return nil, fmt.Errorf("%s is larger than %d bytes (a real one is a few KiB); not importing it", MetadataFile, MaxMetadataSize)
	}
	var b Backup
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %w", MetadataFile, err)
	}
	switch {
	case b.APIVersion != APIVersion || b.Kind != BackupKind:
		return nil, fmt.Errorf("%s holds a %s %s, not a %s %s", MetadataFile, quoteOrNone(b.APIVersion), quoteOrNone(b.Kind), APIVersion, BackupKind)
	case b.Metadata.Name != name:
		return nil, fmt.Errorf("%s names the backup %q, but it is in the folder of %q", MetadataFile, b.Metadata.Name, name)
	}
	if _, err := b.TTL(); err != nil {
		return nil, err
	}
	if err := b.checkControl(); err != nil {
		return nil, err
	}
	return &b, nil
}

// checkControl refuses a field Lethe records and shows (namespaces, the
// storage location, the phase, the UID) that holds a control character,
// DEL or a bidi control: no Kubernetes name or phase can, and it would
// reach an operator's terminal as an escape sequence.
func (b *Backup) checkControl() error {
	fields := []struct{ what, s string }{
		{"spec.storageLocation", b.Spec.StorageLocation}, {"status.phase", b.Status.Phase}, {"metadata.uid", b.Metadata.UID},
	}
	for _, ns := range b.Spec.IncludedNamespaces {
		fields = append(fields, struct{ what, s string }{"spec.includedNamespaces", ns})
	}
	for _, f := range fields {
		if r, bad := termtext.Control(f.s); bad {
			return fmt.Errorf("%s: %s %s holds %s, which no Kubernetes name can", MetadataFile, f.what, strconv.Quote(f.s), termtext.Describe(r))
		}
	}
	return nil
}

func quoteOrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return fmt.Sprintf("%q", s)
}

// TTL is spec.ttl; zero when unset.
func (b *Backup) TTL() (time.Duration, error) {
	if b.Spec.TTL == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(b.Spec.TTL)
	if err != nil {
		return 0, fmt.Errorf("%s: spec.ttl %q is not a duration", MetadataFile, b.Spec.TTL)
	}
	if d < 0 {
		return 0, errors.New(MetadataFile + ": spec.ttl is negative")
	}
	return d, nil
}

// CreatedAt is when Velero created the backup: metadata.creationTimestamp,
// else status.startTimestamp; zero when neither is set.
func (b *Backup) CreatedAt() time.Time {
	switch {
	case b.Metadata.CreationTimestamp != nil:
		return b.Metadata.CreationTimestamp.UTC()
	case b.Status.StartTimestamp != nil:
		return b.Status.StartTimestamp.UTC()
	}
	return time.Time{}
}

// ExpiresAt is status.expiration, else the creation time plus the TTL;
// zero when the backup never expires.
func (b *Backup) ExpiresAt() time.Time {
	if b.Status.Expiration != nil {
		return b.Status.Expiration.UTC()
	}
	ttl, _ := b.TTL()
	if c := b.CreatedAt(); ttl > 0 && !c.IsZero() {
		return c.Add(ttl)
	}
	return time.Time{}
}

// PluginBackup describes a backup to build the velero.io/v1 Backup JSON
// that Velero's DeleteItemAction plugins receive, when there is no
// velero-backup.json to send (a backup Lethe registered itself, or one
// synced before Lethe recorded the file). UID and CreatedAt are the
// source system's when known (Velero's metadata.uid and
// creationTimestamp), else Lethe's.
type PluginBackup struct {
	Name            string
	UID             string
	Labels          map[string]string
	Annotations     map[string]string
	CreatedAt       time.Time
	ExpiresAt       time.Time
	StorageLocation string
}

// Namespace is where Velero keeps its objects by default; the Backup JSON
// built for plugins carries it, as a Backup Velero sends would.
const Namespace = "velero"

// BackupJSON builds a velero.io/v1 Backup object for a plugin, with the
// fields Velero fills that Lethe knows, in phase Deleting as Velero's
// deletion controller sends it.
func BackupJSON(in PluginBackup) ([]byte, error) {
	b := Backup{
		APIVersion: APIVersion,
		Kind:       BackupKind,
		Metadata: ObjectMeta{
			Name: in.Name, Namespace: Namespace, UID: in.UID,
			Labels: in.Labels, Annotations: in.Annotations,
		},
		Spec:   BackupSpec{StorageLocation: in.StorageLocation},
		Status: BackupStat{Phase: PhaseDeleting},
	}
	if !in.CreatedAt.IsZero() {
		t := in.CreatedAt.UTC().Truncate(time.Second)
		b.Metadata.CreationTimestamp = &t
	}
	if !in.ExpiresAt.IsZero() {
		t := in.ExpiresAt.UTC().Truncate(time.Second)
		b.Status.Expiration = &t
		if !in.CreatedAt.IsZero() {
			b.Spec.TTL = t.Sub(in.CreatedAt.UTC().Truncate(time.Second)).String()
		}
	}
	return json.Marshal(b)
}

// DeletingObject is the Backup object Velero's DeleteItemAction plugins
// receive for the velero-backup.json raw: the object as it is, with
// status.phase set to Deleting, as Velero's deletion controller patches
// the Backup before it runs them (backup_deletion_controller.go). Every
// other field, known to Lethe or not, is kept.
func DeletingObject(raw []byte) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %w", MetadataFile, err)
	}
	status := map[string]json.RawMessage{}
	if s, ok := obj["status"]; ok && string(s) != "null" {
		if err := json.Unmarshal(s, &status); err != nil {
			return nil, fmt.Errorf("%s: status is not an object: %w", MetadataFile, err)
		}
	}
	status["phase"] = json.RawMessage(`"` + PhaseDeleting + `"`)
	s, err := json.Marshal(status)
	if err != nil {
		return nil, err
	}
	obj["status"] = s
	return json.Marshal(obj)
}

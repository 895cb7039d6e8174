package pluginhost

// This file fixes the API the deletion pipeline uses. The implementation
// lives beside it.

import (
	"time"

	"github.com/lethehq/lethe/pkg/plugin"
)

// Info describes one discovered plugin.
type Info struct {
	Name            string // full name, "<dns-subdomain>/<name>"
	Binary          string // absolute path of the executable
	ProtocolVersion int
	Protocol        string                  // ProtocolLethe, or ProtocolVelero for an unmodified Velero plugin
	Version         string                  // what the plugin reports
	Selector        plugin.ResourceSelector // as the plugin declared it
	Matcher         *plugin.Matcher         // compiled from Selector, its resource names resolved (ResolveSelector)
	// Unresolved are the resource names of Selector that are not
	// built-in Kubernetes resources: they select only the items of a
	// tarball folder resources/<name>/ (a custom resource's plural,
	// with or without its group); `lethe plugin list` warns of them.
	Unresolved     []string
	MaxConcurrency int
	Checksum       string // sha256 hex of the binary
	ChecksumStatus string // "locked", "unlocked" (no lock file)
}

// Item is one item sent to a plugin. ID is unique within a Session.
type Item struct {
	ID   uint64
	Item plugin.Item
}

// Result is the result for one item ID.
type Result struct {
	ID uint64
	plugin.Result
}

// SessionOptions tune a Session.
type SessionOptions struct {
	// BatchSize is how many items go in one stream message (default 256).
	BatchSize int
	// Window caps unacknowledged items (default 4×BatchSize).
	Window int
	// ItemTimeout overrides the plugin's execute timeout.
	ItemTimeout time.Duration
	// VeleroBackup, when set, is the velero.io/v1 Backup JSON an
	// unmodified Velero plugin receives, as it is (the backup's own
	// velero-backup.json), instead of the one built from the
	// plugin.Backup. Lethe's own plugins never see it.
	VeleroBackup []byte
	// VeleroLocation is the name of the backup's storage location, the
	// spec.storageLocation of the Backup built for a Velero plugin when
	// there is no VeleroBackup and the backup has no
	// velero.io/storage-location label (Velero's BackupStorageLocation
	// name, never a URL).
	VeleroLocation string
}

package view

import (
	"context"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/storageloc"
)

// LocationStatusKind is the kind of a location's check (lethe location
// list -o json, the API's /api/v1/locations).
const LocationStatusKind = manifest.KindLocationStatus

// Location is the JSON and YAML shape of a storage location's check.
type Location struct {
	Kind     string `json:"kind"` // always "LocationStatus"
	Name     string `json:"name"`
	URL      string `json:"url"`
	Default  bool   `json:"default"`
	ReadOnly bool   `json:"readOnly"`
	// CredentialsFile is the location's own credentials file, when it
	// has one (else its credentials come from the environment).
	CredentialsFile string `json:"credentialsFile,omitempty"`
	// Phase, LastCheckTime and LastError are this command's own check,
	// made now: unknown is never shown as available.
	Phase         string     `json:"phase"`
	LastCheckTime time.Time  `json:"lastCheckTime"`
	LastError     string     `json:"lastError,omitempty"`
	Backups       int        `json:"backups"`
	LastSyncTime  *time.Time `json:"lastSyncTime,omitempty"`
}

// Locations checks each location of set now (its Phase, LastCheckTime
// and LastError) and counts the backups of each; all is every declared
// location (a backup names its location by name or by URL).
func Locations(ctx context.Context, st catalog.Resources, locs *blobstore.Locations, all, set storageloc.Set) ([]*Location, error) {
	counts := map[string]int{}
	rs, err := listAll(ctx, st, catalog.ListOptions{Kind: backup.Kind})
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		b, err := backup.FromResource(r)
		if err != nil {
			continue
		}
		name := b.Spec.Location
		if name == "" {
			if l, ok := all.ByURL(b.Spec.StorageLocation); ok {
				name = l.Name
			}
		}
		counts[name]++
	}
	var out []*Location
	for _, l := range set {
		v := &Location{Kind: LocationStatusKind, Name: l.Name, URL: l.URL, Default: l.Default, ReadOnly: l.ReadOnly, CredentialsFile: l.CredentialsFile,
			Phase: storageloc.PhaseAvailable, LastCheckTime: time.Now().UTC().Truncate(time.Second), Backups: counts[l.Name]}
		if _, err := storageloc.Check(ctx, locs, l); err != nil {
			v.Phase, v.LastError = storageloc.PhaseUnavailable, err.Error()
		}
		s, err := storageloc.Load(ctx, st, l.Name)
		if err != nil {
			return nil, err
		}
		if s != nil {
			v.LastSyncTime = s.LastSyncTime
		}
		out = append(out, v)
	}
	return out, nil
}

// listAll reads every page of a listing.
func listAll(ctx context.Context, st catalog.Resources, opts catalog.ListOptions) ([]*catalog.Resource, error) {
	var out []*catalog.Resource
	for {
		page, err := st.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Continue
	}
}

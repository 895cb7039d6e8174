package registry

import (
	"io"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/velero"
)

// SamplesPerPlugin is how many item keys a backup records per expected
// plugin, for the audit of a deletion that skips that plugin.
const SamplesPerPlugin = 5

// scanned is one validating pass over a tarball.
type scanned struct {
	sum      *archive.Summary
	expected map[string]backup.ExpectedPlugin
}

// scan validates the tarball and, in the same pass, counts the items each
// installed plugin selects, with the same rule the deletion pipeline uses
// to send them.
func (g *Registry) scan(r io.Reader) (*scanned, error) {
	infos := g.cfg.Plugins.Plugins()
	counts := make([]backup.ExpectedPlugin, len(infos))
	sum, err := archive.ValidateVisit(r, g.cfg.Limits, func(it *archive.Item) {
		for i := range infos {
			if selects(infos[i], it) {
				c := &counts[i]
				c.Items++
				if len(c.Samples) < SamplesPerPlugin {
					c.Samples = append(c.Samples, it.Key())
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	expected := make(map[string]backup.ExpectedPlugin)
	for i, in := range infos {
		if counts[i].Items > 0 {
			expected[in.Name] = counts[i]
		}
	}
	return &scanned{sum: sum, expected: expected}, nil
}

// selects reports whether a plugin wants an item (as deletion's matcher
// decides: a plugin without a matcher wants everything).
func selects(in pluginhost.Info, it *archive.Item) bool {
	m := in.Matcher
	if m == nil {
		return true
	}
	if !m.MatchesResource(it.GroupResource(), it.Resource, it.Namespace) {
		return false
	}
	return !m.HasLabelSelector() || m.MatchesLabels(it.Labels)
}

// addSnapshots counts, in the expected plugins, the native volume
// snapshots that follow the tarball's items (from ordinal first), as the
// deletion pipeline will send them.
func (sc *scanned) addSnapshots(infos []pluginhost.Info, first int64, snaps []velero.SnapshotItem) {
	for i := range snaps {
		it := backup.SnapshotItem(first+int64(i), &snaps[i])
		for _, in := range infos {
			if !selects(in, it) {
				continue
			}
			c := sc.expected[in.Name]
			c.Items++
			if len(c.Samples) < SamplesPerPlugin {
				c.Samples = append(c.Samples, it.Key())
			}
			sc.expected[in.Name] = c
		}
	}
}

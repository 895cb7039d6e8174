// Command noop is the lethe.io/noop plugin: it accepts every item and does
// nothing. The benchmarks use it to measure the host and the protocol alone.
//
// It has no configuration. It executes up to 1024 items at once. It
// removes nothing outside Lethe, so it has no need to check that an item
// belongs to the backup being deleted (see docs/plugin-authoring.md,
// "Delete only what the backup owns").
package main

import (
	"context"

	"github.com/lethehq/lethe/pkg/plugin"
)

// Version is the plugin's version.
const Version = "v1.0.0"

func main() {
	plugin.Serve(&plugin.Plugin{
		Name:           "noop",
		Version:        Version,
		Action:         action{},
		MaxConcurrency: 1024,
	})
}

// action accepts everything.
type action struct{}

var _ plugin.DeleteItemAction = action{}

func (action) AppliesTo(context.Context) (plugin.ResourceSelector, error) {
	return plugin.ResourceSelector{}, nil
}

func (action) Execute(context.Context, *plugin.DeleteItemActionInput) error { return nil }

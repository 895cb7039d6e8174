package gc

import (
	"context"

	"github.com/lethehq/lethe/internal/catalog"
)

// StepClaimed is stepClaimed, for the tests of package gc_test: one step
// of a claimed work item, under its fence.
func (c *Collector) StepClaimed(ctx context.Context, w *catalog.WorkItem) error {
	return c.stepClaimed(ctx, w)
}

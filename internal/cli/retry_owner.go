package cli

import (
	"context"
	"fmt"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
)

// retryRows names rows of the retry queue the way the other commands name
// things: by the row's ID (what 'lethe retry list' shows), or by its
// owner, KIND NAME [-n NS], for every row of that owner. A walkthrough then
// never depends on row numbers.
func (a *app) retryRows(ctx context.Context, q *retry.Queue, args []string, ns string) ([]int64, error) {
	if len(args) == 1 {
		if ns != "" {
			return nil, usageError{fmt.Errorf("-n goes with KIND NAME, not with a row ID")}
		}
		id, err := a.retryRow(ctx, q, args[0])
		if err != nil {
			return nil, err
		}
		return []int64{id}, nil
	}
	k, err := resourceKey(args[0], args[1], ns)
	if err != nil {
		return nil, err
	}
	if k.Kind, err = a.kindOf(ctx, k.Kind); err != nil {
		return nil, err
	}
	rows, err := q.List(ctx, catalog.RetryFilter{Key: k.String()})
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, retryNotFound{fmt.Errorf("no retry row for %s (nothing of its deletion waits, or it is finished)", keyText(k))}
	}
	ids := make([]int64, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids, nil
}

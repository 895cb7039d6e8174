package view

import "github.com/lethehq/lethe/internal/catalog"

// RetryItemKind is the kind of a row of the retry queue as -o json|yaml
// prints it; what the row is (BackupItem, Resource, Wait) is its type.
const RetryItemKind = "RetryItem"

// RetryItem is a row of the retry queue: the row's own kind field is
// printed as type.
type RetryItem struct {
	*catalog.RetryRow
	Kind string `json:"kind"` // always RetryItem; hides the row's kind
	Type string `json:"type"` // BackupItem, Resource, Wait or Location
}

// NewRetryItem is r's view.
func NewRetryItem(r *catalog.RetryRow) RetryItem {
	return RetryItem{RetryRow: r, Kind: RetryItemKind, Type: r.Kind}
}

// RetryItems is NewRetryItem of each row.
func RetryItems(rows []*catalog.RetryRow) []RetryItem {
	out := make([]RetryItem, 0, len(rows))
	for _, r := range rows {
		out = append(out, NewRetryItem(r))
	}
	return out
}

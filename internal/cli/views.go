package cli

import (
	"github.com/lethehq/lethe/internal/catalog"
)

// Kinds of the structured output of delete and explain.
const (
	kindDeletionResult = "DeletionResult"
	kindCascadePlan    = "CascadePlan"
)

// deletionResultView is what delete KIND NAME did: scheduled, requested,
// purged or stuck (with the explanation).
type deletionResultView struct {
	Resource    catalog.Key `json:"resource"`
	Result      string      `json:"result"`
	Note        string      `json:"note,omitempty"`
	Explanation any         `json:"explanation,omitempty"`
}

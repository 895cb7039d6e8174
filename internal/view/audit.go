package view

import (
	"encoding/json"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
)

// AuditEntryKind is the kind of an audit entry's JSON.
const AuditEntryKind = "AuditEntry"

// AuditEntry is an audit entry as -o json|yaml shows it: kind
// "AuditEntry", and the resource it is about under "resource".
type AuditEntry struct {
	Kind      string          `json:"kind"` // always "AuditEntry"
	ID        int64           `json:"id"`
	Time      time.Time       `json:"time"`
	Actor     string          `json:"actor"`
	Action    string          `json:"action"`
	Resource  AuditResource   `json:"resource"`
	FromPhase catalog.Phase   `json:"fromPhase,omitempty"`
	ToPhase   catalog.Phase   `json:"toPhase,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Details   json.RawMessage `json:"details,omitempty"`
}

// AuditResource names the resource of an audit entry.
type AuditResource struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

func AuditEntries(entries []catalog.AuditEntry) []AuditEntry {
	out := make([]AuditEntry, len(entries))
	for i, e := range entries {
		out[i] = AuditEntry{
			Kind: AuditEntryKind, ID: e.ID, Time: e.Time, Actor: e.Actor, Action: e.Action,
			Resource:  AuditResource{Kind: e.Kind, Namespace: e.Namespace, Name: e.Name, UID: e.UID},
			FromPhase: e.FromPhase, ToPhase: e.ToPhase, Reason: e.Reason, Details: e.Details,
		}
	}
	return out
}

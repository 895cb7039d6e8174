package sqlstore

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/lethehq/lethe/internal/catalog"
)

// changedFields names what an update changes, for its audit entry's
// reason ("changed: spec, labels"); "" when it changes nothing. An update
// that changes nothing is neither written nor audited: the audit log
// records real changes, and an update never changes the phase, so its
// entry (Active→Active, Deleting→Deleting) says nothing unless it names
// what changed.
func changedFields(cur, next *catalog.Resource) string {
	var out []string
	add := func(changed bool, name string) {
		if changed {
			out = append(out, name)
		}
	}
	add(!maps.Equal(cur.Labels, next.Labels), "labels")
	add(!maps.Equal(cur.Annotations, next.Annotations), "annotations")
	add(!slices.Equal(cur.Owners, next.Owners), "ownerReferences")
	add(!slices.Equal(cur.References, next.References), "references")
	add(!slices.Equal(cur.Finalizers, next.Finalizers), "finalizers")
	add(!sameJSON(cur.Spec, next.Spec), "spec")
	add(!sameJSON(cur.Status, next.Status), "status")
	add(!slices.EqualFunc(cur.Conditions, next.Conditions, sameCondition), "conditions")
	return strings.Join(out, ", ")
}

func sameCondition(a, b catalog.Condition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.LastTransitionTime.Equal(b.LastTransitionTime)
}

// sameJSON compares two JSON values as values: PostgreSQL's jsonb gives a
// stored spec back with its keys in another order than they were written.
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	va, oka := decodeJSON(a)
	vb, okb := decodeJSON(b)
	return oka && okb && reflect.DeepEqual(va, vb)
}

func decodeJSON(raw json.RawMessage) (any, bool) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, true
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

package catalog

import (
	"cmp"
	"errors"
	"slices"
	"strings"
)

// ErrCycle is the error of a write that would close a cycle of deletion
// edges (see CycleError).
var ErrCycle = errors.New("deletion cycle")

// Edge kinds of a deletion cycle (CycleEdge.Via).
const (
	ViaOwner   = "owner"   // To has an owner reference to From
	ViaBlock   = "block"   // To holds a block reference to From
	ViaCascade = "cascade" // To holds a cascade reference to From
)

// CycleEdge is one edge of a deletion cycle, in the direction a deletion
// travels: deleting From reaches To (From is To's owner, or the target of
// To's block or cascade reference), and From's purge may wait for To.
type CycleEdge struct {
	From Key    `json:"from"`
	To   Key    `json:"to"`
	Via  string `json:"via"`
}

// String says the edge in words ("Node/y is owned by Node/x").
func (e CycleEdge) String() string {
	switch e.Via {
	case ViaOwner:
		return e.From.String() + " owns " + e.To.String()
	case ViaBlock:
		return e.To.String() + " holds a block reference to " + e.From.String()
	case ViaCascade:
		return e.To.String() + " holds a cascade reference to " + e.From.String()
	}
	return e.From.String() + " → " + e.To.String()
}

// CycleError is a cycle of deletion edges: owner edges, block and cascade
// references, in any mix. None of its resources could be purged before
// the others, so the catalog refuses a write that would close one, inside
// the write's transaction.
type CycleError struct {
	Edges []CycleEdge
}

// Canonical rotates edges so that the cycle starts at its smallest key:
// every resource of a cycle reports it with the same words.
func Canonical(edges []CycleEdge) []CycleEdge {
	if len(edges) == 0 {
		return nil
	}
	first := 0
	for i, e := range edges {
		if cmpKey(e.From, edges[first].From) < 0 {
			first = i
		}
	}
	return append(slices.Clone(edges[first:]), edges[:first]...)
}

func cmpKey(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// FormatCycle is the one line that names a cycle:
// "cycle: Node/x owns Node/y; Node/y holds a block reference to Node/x".
func FormatCycle(edges []CycleEdge) string {
	parts := make([]string, len(edges))
	for i, e := range Canonical(edges) {
		parts[i] = e.String()
	}
	return "cycle: " + strings.Join(parts, "; ")
}

func (e *CycleError) Error() string {
	return FormatCycle(e.Edges) + " (none of them could ever be purged)"
}

// Unwrap makes errors.Is(err, ErrCycle) true.
func (e *CycleError) Unwrap() error { return ErrCycle }

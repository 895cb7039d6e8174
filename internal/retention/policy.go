package retention

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/lethehq/lethe/internal/velero"
)

// Velero's finished phases: the only ones a policy ever deletes (DESIGN
// §10: unfinished backups are never deleted). Every other phase, the empty
// one and any phase Lethe does not know are unfinished.
const (
	PhaseCompleted        = velero.PhaseCompleted
	PhasePartiallyFailed  = velero.PhasePartiallyFailed
	PhaseFailed           = velero.PhaseFailed
	PhaseFailedValidation = velero.PhaseFailedValidation
)

var finishedPhases = []string{PhaseCompleted, PhasePartiallyFailed, PhaseFailed, PhaseFailedValidation}

// Finished reports whether a backup in phase is finished: Velero's rule
// (velero.Finished), the one deletion and TTL follow.
func Finished(phase string) bool { return velero.Finished(phase) }

// FinishedPhases lists the finished phases, for messages.
func FinishedPhases() []string { return slices.Clone(finishedPhases) }

// HoldLabel set to "true" on a backup keeps it from every policy.
const (
	HoldLabel = "lethe.io/retain"
	HoldValue = "true"
)

// ActorPrefix starts the audit actor of the deletions a policy requests
// ("retention:nightly-gfs"); undelete recognises them by it.
const ActorPrefix = "retention:"

// DefaultGroupBy is the label a policy groups by when it names none:
// backups of one Velero schedule form a group.
const DefaultGroupBy = "velero.io/schedule-name"

// DefaultFailedRetention is how long a policy keeps backups in a finished
// phase that its rules do not count (Failed, FailedValidation by default).
const DefaultFailedRetention = 7 * 24 * time.Hour

// DefaultCountPhases are the phases the rules count by default.
func DefaultCountPhases() []string { return []string{PhaseCompleted, PhasePartiallyFailed} }

// Backup is what a policy knows of a backup.
type Backup struct {
	Name    string
	Created time.Time
	// Phase is Velero's status.phase; a backup Lethe registered itself
	// (no velero-backup.json) is Completed.
	Phase  string
	Labels map[string]string
	// StorageLocation is the name of the backup's Velero storage location,
	// empty when unknown.
	StorageLocation string
}

// Policy is a validated RetentionPolicy (see internal/manifest's
// RetentionPolicy for the document that holds one).
type Policy struct {
	Name string
	// Selector picks the backups the policy governs; nil selects all.
	Selector labels.Selector
	// StorageLocation, when set, also requires the backup's location.
	StorageLocation string
	// GroupBy are the label keys whose values form a group; empty: one
	// group for every selected backup.
	GroupBy []string
	Rules   Rules
	// TimeZone is where calendar buckets are computed; nil is UTC.
	TimeZone *time.Location
	// MinSuccessful keeps the newest Completed backups of each group
	// until at least that many are kept.
	MinSuccessful int
	// MaxDeletesPerRun caps the deletions of one evaluation (the oldest
	// go first); 0: no cap.
	MaxDeletesPerRun int
	// CountPhases are the phases the rules count (see
	// DefaultCountPhases). Backups in other finished phases are deleted
	// once older than FailedRetention.
	CountPhases     []string
	FailedRetention time.Duration
}

// Action is a plan's decision for one backup.
type Action string

const (
	Keep   Action = "keep"
	Delete Action = "delete"
)

// Item is one backup in a policy's plan.
type Item struct {
	Policy  string
	Backup  string
	Group   string
	Created time.Time
	Phase   string
	Action  Action
	Reasons []string
}

// Plan is one policy's decisions, by group, newest first within each
// group.
type Plan struct {
	Policy string
	Items  []*Item
	// Warnings are things the operator should see (a selector that
	// matches nothing).
	Warnings []string
}

// Deletes counts the plan's deletions.
func (p *Plan) Deletes() int {
	n := 0
	for _, it := range p.Items {
		if it.Action == Delete {
			n++
		}
	}
	return n
}

// Selects reports whether p governs b.
func (p *Policy) Selects(b *Backup) bool {
	if p.StorageLocation != "" && b.StorageLocation != p.StorageLocation {
		return false
	}
	return p.Selector == nil || p.Selector.Matches(labels.Set(b.Labels))
}

// Group is b's group under p: the groupBy labels as a label selector
// ("velero.io/schedule-name=nightly"; "!key" for a backup without the
// key), empty when p groups everything together.
func (p *Policy) Group(b *Backup) string {
	parts := make([]string, 0, len(p.GroupBy))
	for _, k := range p.GroupBy {
		if v, ok := b.Labels[k]; ok {
			parts = append(parts, k+"="+v)
		} else {
			parts = append(parts, "!"+k)
		}
	}
	return strings.Join(parts, ",")
}

func held(b *Backup) bool { return b.Labels[HoldLabel] == HoldValue }

// Evaluate computes p's plan for backups at now. For each group:
//  1. unfinished backups are kept, untouched;
//  2. backups in CountPhases go through the rules (Forget);
//  3. backups in other finished phases are deleted once older than
//     FailedRetention;
//  4. a backup labelled lethe.io/retain=true is kept, whatever 1-3 said;
//  5. minSuccessful keeps the newest Completed backups until enough are
//     kept;
//
// and then, over the whole plan, maxDeletesPerRun postpones the newest
// deletions beyond the cap.
func Evaluate(p *Policy, backups []Backup, now time.Time) *Plan {
	loc := p.TimeZone
	if loc == nil {
		loc = time.UTC
	}
	plan := &Plan{Policy: p.Name}
	groups := map[string][]*Backup{}
	for i := range backups {
		b := &backups[i]
		if p.Selects(b) {
			g := p.Group(b)
			groups[g] = append(groups[g], b)
		}
	}
	if len(groups) == 0 {
		sel := "every backup"
		if p.Selector != nil && !p.Selector.Empty() {
			sel = fmt.Sprintf("selector %q", p.Selector.String())
		}
		if p.StorageLocation != "" {
			sel += fmt.Sprintf(" in storage location %q", p.StorageLocation)
		}
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("RetentionPolicy %s: %s matches no backup", p.Name, sel))
	}
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		plan.Items = append(plan.Items, evaluateGroup(p, g, groups[g], loc, now)...)
	}
	capDeletes(p, plan)
	return plan
}

func evaluateGroup(p *Policy, group string, bs []*Backup, loc *time.Location, now time.Time) []*Item {
	byName := make(map[string]*Item, len(bs))
	var counted []Entry
	var items []*Item
	for _, b := range bs {
		it := &Item{Policy: p.Name, Backup: b.Name, Group: group, Created: b.Created, Phase: b.Phase}
		items = append(items, it)
		byName[b.Name] = it
		switch {
		case !Finished(b.Phase):
			it.Action = Keep
			it.Reasons = []string{fmt.Sprintf("unfinished (phase %q): never deleted", b.Phase)}
		case slices.Contains(p.CountPhases, b.Phase):
			counted = append(counted, Entry{Name: b.Name, Created: b.Created, Labels: b.Labels})
		case now.Sub(b.Created) >= p.FailedRetention:
			it.Action = Delete
			it.Reasons = []string{fmt.Sprintf("phase %s, older than failedRetention %s", b.Phase, p.FailedRetention)}
		default:
			it.Action = Keep
			it.Reasons = []string{fmt.Sprintf("phase %s, within failedRetention %s", b.Phase, p.FailedRetention)}
		}
	}
	for _, v := range Forget(counted, p.Rules, loc, now) {
		it := byName[v.Entry.Name]
		if v.Keep {
			it.Action, it.Reasons = Keep, v.Reasons
		} else {
			it.Action, it.Reasons = Delete, []string{"no keep rule matched"}
		}
	}
	for _, b := range bs {
		if held(b) {
			it := byName[b.Name]
			it.Action = Keep
			it.Reasons = append([]string{"hold " + HoldLabel + "=" + HoldValue}, it.Reasons...)
		}
	}
	slices.SortStableFunc(items, func(a, b *Item) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.Backup, b.Backup)
	})
	if p.MinSuccessful > 0 {
		kept := 0
		for _, it := range items {
			if it.Phase == PhaseCompleted && it.Action == Keep {
				kept++
			}
		}
		for _, it := range items {
			if kept >= p.MinSuccessful {
				break
			}
			if it.Phase == PhaseCompleted && it.Action == Delete {
				it.Action = Keep
				it.Reasons = []string{fmt.Sprintf("minSuccessful %d", p.MinSuccessful)}
				kept++
			}
		}
	}
	return items
}

// capDeletes keeps the plan to p.MaxDeletesPerRun deletions: the oldest
// backups go first, the others are postponed (kept, with the reason).
func capDeletes(p *Policy, plan *Plan) {
	if p.MaxDeletesPerRun <= 0 || plan.Deletes() <= p.MaxDeletesPerRun {
		return
	}
	var dels []*Item
	for _, it := range plan.Items {
		if it.Action == Delete {
			dels = append(dels, it)
		}
	}
	slices.SortStableFunc(dels, func(a, b *Item) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.Backup, b.Backup)
	})
	for _, it := range dels[p.MaxDeletesPerRun:] {
		it.Action = Keep
		it.Reasons = append(it.Reasons, fmt.Sprintf("postponed: maxDeletesPerRun %d reached", p.MaxDeletesPerRun))
	}
	plan.Warnings = append(plan.Warnings, fmt.Sprintf("RetentionPolicy %s: would delete %d backups, maxDeletesPerRun is %d: the %d oldest go in this run",
		p.Name, len(dels), p.MaxDeletesPerRun, p.MaxDeletesPerRun))
}

// Combine applies the overlap rule to the plans of several policies: a
// backup is deleted only if every policy that selects it says delete.
// Where one policy keeps a backup that another would delete, the other's
// item becomes keep, naming the keeping policies.
func Combine(plans []*Plan) {
	keptBy := map[string][]string{}
	for _, pl := range plans {
		for _, it := range pl.Items {
			if it.Action == Keep && !slices.Contains(keptBy[it.Backup], pl.Policy) {
				keptBy[it.Backup] = append(keptBy[it.Backup], pl.Policy)
			}
		}
	}
	for _, pl := range plans {
		for _, it := range pl.Items {
			if it.Action == Delete && len(keptBy[it.Backup]) > 0 {
				it.Action = Keep
				it.Reasons = append(it.Reasons, "kept by RetentionPolicy "+strings.Join(keptBy[it.Backup], ", "))
			}
		}
	}
}

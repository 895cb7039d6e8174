// Package planner reads the catalog's RetentionPolicies and Backups and
// builds their retention plans with package retention. It is the one
// place that turns catalog rows into the engine's input, shared by
// `lethe retention plan` and the server; it writes nothing.
//
// Rows are not trusted: a policy is re-validated as apply validates it,
// and a backup that cannot be decoded stops the plan (a policy must never
// decide on a partial view of a group).
package planner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/retention"
)

// Store is what the planner reads.
type Store interface {
	Get(ctx context.Context, k catalog.Key) (*catalog.Resource, error)
	List(ctx context.Context, opts catalog.ListOptions) (*catalog.ListResult, error)
}

// Policy is one stored policy with its plan.
type Policy struct {
	Resource *catalog.Resource
	Spec     *manifest.RetentionPolicy
	Plan     *retention.Plan
}

// Result is the plans of every stored policy, overlap applied.
type Result struct {
	Policies []*Policy
}

// Get returns the named policy's entry, or nil.
func (r *Result) Get(name string) *Policy {
	for _, p := range r.Policies {
		if p.Resource.Name == name {
			return p
		}
	}
	return nil
}

// ErrNoPolicy is returned by Build when no RetentionPolicy is stored, or
// every stored one is being deleted.
var ErrNoPolicy = errors.New("no RetentionPolicy in the catalog (or only ones being deleted): write one and 'lethe apply -f' it (see docs/retention.md)")

// Build plans every stored RetentionPolicy at now. A backup already
// pending deletion (Scheduled or Deleting) is not part of any plan: it
// is on its way, and undelete brings it back.
func Build(ctx context.Context, st Store, now time.Time) (*Result, error) {
	return BuildWith(ctx, st, now, nil)
}

// BuildWith is Build with the policies of desired in place of the stored
// ones of the same name, or added: the plan a `lethe apply` would bring
// about.
func BuildWith(ctx context.Context, st Store, now time.Time, desired []*manifest.RetentionPolicy) (*Result, error) {
	prs, err := listAll(ctx, st, catalog.ListOptions{Kind: manifest.KindRetentionPolicy})
	if err != nil {
		return nil, err
	}
	res := &Result{}
	replaced := map[string]bool{}
	for _, d := range desired {
		replaced[d.Policy.Name] = true
		res.Policies = append(res.Policies, &Policy{Resource: &catalog.Resource{Kind: manifest.KindRetentionPolicy, Name: d.Policy.Name, Phase: catalog.PhaseActive}, Spec: d})
	}
	for _, r := range prs {
		if r.Phase != catalog.PhaseActive || replaced[r.Name] {
			continue
		}
		spec, err := manifest.RetentionPolicyFromResource(r.Name, r.Spec)
		if err != nil {
			return nil, fmt.Errorf("stored RetentionPolicy %s no longer validates: %w", r.Name, err)
		}
		res.Policies = append(res.Policies, &Policy{Resource: r, Spec: spec})
	}
	if len(res.Policies) == 0 {
		return nil, ErrNoPolicy
	}
	brs, err := listAll(ctx, st, catalog.ListOptions{Kind: backup.Kind, Phase: catalog.PhaseActive})
	if err != nil {
		return nil, err
	}
	bs := make([]retention.Backup, 0, len(brs))
	for _, r := range brs {
		b, err := FromResource(r)
		if err != nil {
			return nil, err
		}
		bs = append(bs, b)
	}
	plans := make([]*retention.Plan, 0, len(res.Policies))
	for _, p := range res.Policies {
		p.Plan = retention.Evaluate(p.Spec.Policy, bs, now)
		plans = append(plans, p.Plan)
	}
	retention.Combine(plans)
	return res, nil
}

// FromResource is a Backup row as the engine sees it. A backup without a
// velero-backup.json (registered by Lethe) is Completed; one with it has
// the phase its last sync read (an empty phase is unfinished).
func FromResource(r *catalog.Resource) (retention.Backup, error) {
	b, err := backup.FromResource(r)
	if err != nil {
		return retention.Backup{}, err
	}
	out := retention.Backup{Name: r.Name, Created: b.Created(), Phase: retention.PhaseCompleted, Labels: r.Labels}
	if v := b.Spec.Velero; v != nil {
		out.StorageLocation = v.StorageLocation
	}
	if phase, unfinished := b.Unfinished(); unfinished || phase != "" {
		out.Phase = phase
	}
	return out, nil
}

func listAll(ctx context.Context, st Store, opts catalog.ListOptions) ([]*catalog.Resource, error) {
	var out []*catalog.Resource
	for {
		page, err := st.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Continue
	}
}

// Names lists the stored policies' names, sorted.
func (r *Result) Names() []string {
	var out []string
	for _, p := range r.Policies {
		out = append(out, p.Resource.Name)
	}
	slices.Sort(out)
	return out
}

// OverridingTTL returns the first stored policy with overrideTTL that
// selects the backup r, or "": such a backup's TTL no longer expires it,
// the policy alone decides. A stored policy that no longer validates is
// an error (never read as "no policy").
func OverridingTTL(ctx context.Context, st Store, r *catalog.Resource) (string, error) {
	prs, err := listAll(ctx, st, catalog.ListOptions{Kind: manifest.KindRetentionPolicy, Phase: catalog.PhaseActive})
	if err != nil {
		return "", err
	}
	var b *retention.Backup
	for _, pr := range prs {
		spec, err := manifest.RetentionPolicyFromResource(pr.Name, pr.Spec)
		if err != nil {
			return "", fmt.Errorf("stored RetentionPolicy %s no longer validates: %w", pr.Name, err)
		}
		if !spec.OverrideTTL {
			continue
		}
		if b == nil {
			bb, err := FromResource(r)
			if err != nil {
				return "", err
			}
			b = &bb
		}
		if spec.Policy.Selects(b) {
			return pr.Name, nil
		}
	}
	return "", nil
}

package manifest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	// Time zones come with the binary: a host without tzdata must not
	// turn Europe/Berlin into an error, nor compute buckets differently.
	_ "time/tzdata"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/retention"
)

// KindRetentionPolicy is the kind of a retention policy (see
// RetentionPolicy).
const KindRetentionPolicy = "RetentionPolicy"

// Retention policy modes.
const (
	ModeDryRun  = "dryRun"
	ModeEnforce = "enforce"
)

// RetentionPolicy is a validated RetentionPolicy document: the engine's
// policy plus how it is carried out.
type RetentionPolicy struct {
	Policy *retention.Policy
	// Mode is ModeDryRun (the default: plans only) or ModeEnforce.
	Mode string
	// DeletionDelay is the grace window of the deletions it schedules;
	// HasDelay is false when the spec sets none (the configured default
	// applies).
	DeletionDelay time.Duration
	HasDelay      bool
	// OverrideTTL: the policy alone decides for the backups it selects
	// (their TTL no longer expires them). False (the default): TTL expiry
	// still applies beside the policy.
	OverrideTTL bool
}

var retentionFields = []string{
	"selector", "storageLocation", "groupBy",
	"keepLast", "keepHourly", "keepDaily", "keepWeekly", "keepMonthly", "keepYearly",
	"keepWithin", "keepWithinHourly", "keepWithinDaily", "keepWithinWeekly", "keepWithinMonthly", "keepWithinYearly",
	"keepLabels", "timeZone", "minSuccessful", "maxDeletesPerRun", "countPhases", "failedRetention",
	"mode", "deletionDelay", "overrideTTL",
}

// ParseRetentionPolicy validates a RetentionPolicy document's spec. Every
// error is one line naming the document and the field.
func ParseRetentionPolicy(d *Document) (*RetentionPolicy, error) {
	if d.Kind != KindRetentionPolicy {
		return nil, d.Errorf("kind", "not a %s", KindRetentionPolicy)
	}
	if d.Metadata.Namespace != "" {
		return nil, d.Errorf("metadata.namespace", "a RetentionPolicy is cluster-scoped, as backups are: remove the namespace")
	}
	if len(d.Status) > 0 {
		return nil, d.Errorf("status", "a RetentionPolicy's status is Lethe's to write")
	}
	if len(d.Spec) == 0 {
		return nil, d.Errorf("spec", "required: a RetentionPolicy needs at least one keep rule (keepLast, keepDaily, ...)")
	}
	var spec any
	if err := json.Unmarshal(d.Spec, &spec); err != nil {
		return nil, d.Errorf("spec", "%v", err)
	}
	p := &parser{d: d}
	rp := p.retentionSpec(spec)
	if p.err != nil {
		return nil, p.err
	}
	return rp, nil
}

// RetentionPolicyFromResource re-validates a stored RetentionPolicy (the
// catalog is not trusted: a row that no longer parses is an error, never
// a policy with its bad fields dropped).
func RetentionPolicyFromResource(name string, spec json.RawMessage) (*RetentionPolicy, error) {
	d := &Document{Source: "catalog", Kind: KindRetentionPolicy, Metadata: Metadata{Name: name}, Spec: spec}
	if e := nameErr(name); e != "" {
		return nil, d.Errorf("metadata.name", "%s", e)
	}
	return ParseRetentionPolicy(d)
}

func (p *parser) retentionSpec(v any) *RetentionPolicy {
	const f = "spec"
	m := p.object(v, f, retentionFields...)
	if m == nil {
		return nil
	}
	pol := &retention.Policy{
		Name:            p.d.Metadata.Name,
		GroupBy:         []string{retention.DefaultGroupBy},
		CountPhases:     retention.DefaultCountPhases(),
		FailedRetention: retention.DefaultFailedRetention,
		TimeZone:        time.UTC,
	}
	rp := &RetentionPolicy{Policy: pol, Mode: ModeDryRun}

	if s := p.str(m, "selector", f, false); s != "" && p.err == nil {
		sel, err := labels.Parse(s)
		if err != nil {
			p.fail(f+".selector", "invalid label selector %q: %v", s, err)
		}
		pol.Selector = sel
	}
	pol.StorageLocation = p.str(m, "storageLocation", f, false)
	if _, ok := m["groupBy"]; ok {
		pol.GroupBy = []string{}
		for i, s := range p.strList(m, "groupBy", f) {
			if errs := validation.IsQualifiedName(s); len(errs) > 0 {
				p.fail(fmt.Sprintf("%s.groupBy[%d]", f, i), "invalid label key %q", s)
			} else if slices.Contains(pol.GroupBy, s) {
				p.fail(fmt.Sprintf("%s.groupBy[%d]", f, i), "label key %q appears twice", s)
			}
			pol.GroupBy = append(pol.GroupBy, s)
		}
	}
	r := &pol.Rules
	for _, c := range []struct {
		key string
		dst *int
	}{{"keepLast", &r.Last}, {"keepHourly", &r.Hourly}, {"keepDaily", &r.Daily}, {"keepWeekly", &r.Weekly}, {"keepMonthly", &r.Monthly}, {"keepYearly", &r.Yearly}} {
		*c.dst = p.count(m, c.key, f, true)
	}
	for _, c := range []struct {
		key string
		dst *retention.Duration
	}{{"keepWithin", &r.Within}, {"keepWithinHourly", &r.WithinHourly}, {"keepWithinDaily", &r.WithinDaily},
		{"keepWithinWeekly", &r.WithinWeekly}, {"keepWithinMonthly", &r.WithinMonthly}, {"keepWithinYearly", &r.WithinYearly}} {
		if s := p.str(m, c.key, f, false); s != "" && p.err == nil {
			d, err := retention.ParseDuration(s)
			if err != nil {
				p.fail(f+"."+c.key, "%v", err)
			}
			*c.dst = d
		}
	}
	for i, s := range p.strList(m, "keepLabels", f) {
		lr, err := retention.ParseLabelRule(s)
		if err != nil {
			p.fail(fmt.Sprintf("%s.keepLabels[%d]", f, i), "invalid label selector %q: %v", s, err)
		}
		r.Labels = append(r.Labels, lr)
	}
	if p.err == nil && r.Empty() {
		p.fail(f, "no keep rule: a policy without one would delete every backup it selects (set keepLast, keepDaily, ...; keepLast: -1 keeps all)")
	}
	if s := p.str(m, "timeZone", f, false); s != "" && p.err == nil {
		loc, err := loadZone(s)
		if err != nil {
			p.fail(f+".timeZone", "unknown time zone %q: use an IANA name such as Europe/Berlin or UTC", s)
		}
		pol.TimeZone = loc
	}
	pol.MinSuccessful = p.count(m, "minSuccessful", f, false)
	pol.MaxDeletesPerRun = p.count(m, "maxDeletesPerRun", f, false)
	if _, ok := m["countPhases"]; ok {
		pol.CountPhases = nil
		for i, s := range p.strList(m, "countPhases", f) {
			field := fmt.Sprintf("%s.countPhases[%d]", f, i)
			if !retention.Finished(s) {
				p.fail(field, "%q is not a finished phase: use %s", s, strings.Join(retention.FinishedPhases(), ", "))
			} else if slices.Contains(pol.CountPhases, s) {
				p.fail(field, "phase %q appears twice", s)
			}
			pol.CountPhases = append(pol.CountPhases, s)
		}
		if len(pol.CountPhases) == 0 && p.err == nil {
			p.fail(f+".countPhases", "empty: the rules would count no backup (leave it out for Completed and PartiallyFailed)")
		}
	}
	if s := p.str(m, "failedRetention", f, false); s != "" && p.err == nil {
		d, err := backup.ParseDuration(s)
		if err != nil {
			p.fail(f+".failedRetention", "%v", err)
		}
		pol.FailedRetention = d
	}
	switch mode := p.str(m, "mode", f, false); mode {
	case "":
	case ModeDryRun, ModeEnforce:
		rp.Mode = mode
	default:
		p.fail(f+".mode", "invalid mode %q: use dryRun (plan only, the default) or enforce", mode)
	}
	if s := p.str(m, "deletionDelay", f, false); s != "" && p.err == nil {
		d, err := backup.ParseDuration(s)
		if err != nil {
			p.fail(f+".deletionDelay", "%v", err)
		}
		rp.DeletionDelay, rp.HasDelay = d, true
	}
	if b, ok := m["overrideTTL"]; ok && b != nil {
		bb, ok := b.(bool)
		if !ok {
			p.fail(f+".overrideTTL", "want true or false, got %s", typeName(b))
		}
		rp.OverrideTTL = bb
	}
	return rp
}

// loadZone is time.LoadLocation without its reading of a file named by
// the zone: only IANA names (letters, digits, '/', '_', '-', '+').
func loadZone(s string) (*time.Location, error) {
	if strings.Contains(s, "..") || strings.HasPrefix(s, "/") || strings.ContainsAny(s, `\ `) || s == "Local" {
		return nil, fmt.Errorf("not an IANA zone name")
	}
	return time.LoadLocation(s)
}

// count reads a non-negative integer (or -1, "unlimited", where
// unlimited is allowed).
func (p *parser) count(m map[string]any, key, field string, unlimited bool) int {
	v, ok := m[key]
	if !ok || v == nil {
		return 0
	}
	fk := join(field, key)
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case float64:
		if x != float64(int64(x)) {
			p.fail(fk, "want a whole number, got %v", x)
			return 0
		}
		n = int64(x)
	default:
		p.fail(fk, "want a number, got %s", typeName(v))
		return 0
	}
	switch {
	case n == -1 && unlimited:
	case n < 0 && unlimited:
		p.fail(fk, "%d is negative: use a count, 0 (off) or -1 (unlimited)", n)
	case n < 0:
		p.fail(fk, "%d is negative: use a count, or 0 (off)", n)
	case n > 1<<31:
		p.fail(fk, "%d is too large", n)
	}
	return int(n)
}

// strList reads a list of strings.
func (p *parser) strList(m map[string]any, key, field string) []string {
	var out []string
	for i, x := range p.list(m, key, field) {
		s, ok := x.(string)
		if !ok {
			p.fail(fmt.Sprintf("%s[%d]", join(field, key), i), "want a string, got %s", typeName(x))
			return nil
		}
		out = append(out, s)
	}
	return out
}

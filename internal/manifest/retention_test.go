package manifest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/retention"
)

const gfsPolicy = `kind: RetentionPolicy
metadata: {name: nightly-gfs}
spec:
  selector: velero.io/schedule-name=nightly
  groupBy: [velero.io/schedule-name]
  keepLast: 3
  keepDaily: 7
  keepWeekly: 5
  keepMonthly: 12
  keepYearly: 2
  minSuccessful: 3
  timeZone: Europe/Berlin
  deletionDelay: 24h
  mode: enforce
`

func TestRetentionPolicyReadsTheREADMEExample(t *testing.T) {
	docs, err := parse(t, gfsPolicy)
	require.NoError(t, err)
	rp, err := manifest.ParseRetentionPolicy(docs[0])
	require.NoError(t, err)
	p := rp.Policy
	require.Equal(t, "nightly-gfs", p.Name)
	require.Equal(t, "velero.io/schedule-name=nightly", p.Selector.String())
	require.Equal(t, retention.Rules{Last: 3, Daily: 7, Weekly: 5, Monthly: 12, Yearly: 2}, p.Rules)
	require.Equal(t, "Europe/Berlin", p.TimeZone.String())
	require.Equal(t, 3, p.MinSuccessful)
	require.Equal(t, manifest.ModeEnforce, rp.Mode)
	require.Equal(t, 24*time.Hour, rp.DeletionDelay)
	require.True(t, rp.HasDelay)
	require.False(t, rp.OverrideTTL)
}

func TestRetentionPolicyDefaults(t *testing.T) {
	docs, err := parse(t, "kind: RetentionPolicy\nmetadata: {name: p}\nspec: {keepLast: 1}\n")
	require.NoError(t, err)
	rp, err := manifest.ParseRetentionPolicy(docs[0])
	require.NoError(t, err)
	require.Equal(t, manifest.ModeDryRun, rp.Mode, "a new policy only plans")
	require.Equal(t, []string{"velero.io/schedule-name"}, rp.Policy.GroupBy)
	require.Equal(t, []string{"Completed", "PartiallyFailed"}, rp.Policy.CountPhases)
	require.Equal(t, 7*24*time.Hour, rp.Policy.FailedRetention)
	require.Equal(t, time.UTC, rp.Policy.TimeZone)
	require.Nil(t, rp.Policy.Selector)
	require.False(t, rp.HasDelay)

	docs, err = parse(t, "kind: RetentionPolicy\nmetadata: {name: p}\nspec: {keepLast: -1, groupBy: []}\n")
	require.NoError(t, err)
	rp, err = manifest.ParseRetentionPolicy(docs[0])
	require.NoError(t, err)
	require.Empty(t, rp.Policy.GroupBy, "an explicit empty groupBy is one group")
	require.Equal(t, retention.Unlimited, rp.Policy.Rules.Last)
}

// TestRetentionPolicyBadInputIsOneLineNamingTheField: every refusal is
// one line naming the source, the document and the field.
func TestRetentionPolicyBadInputIsOneLineNamingTheField(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"{keepLast: 1, keepForever: true}", `m.yaml, document 1 (RetentionPolicy/p): spec.keepForever: unknown field; allowed: selector,`},
		{"{keepDaily: -2}", "spec.keepDaily: -2 is negative: use a count, 0 (off) or -1 (unlimited)"},
		{"{keepLast: 1, minSuccessful: -1}", "spec.minSuccessful: -1 is negative: use a count, or 0 (off)"},
		{"{keepLast: 1, maxDeletesPerRun: -1}", "spec.maxDeletesPerRun: -1 is negative"},
		{"{keepLast: 1.5}", "spec.keepLast: want a whole number, got 1.5"},
		{`{keepLast: "3"}`, `spec.keepLast: want a number, got a string`},
		{"{keepLast: 1, timeZone: Mars/Olympus}", `spec.timeZone: unknown time zone "Mars/Olympus": use an IANA name such as Europe/Berlin or UTC`},
		{"{keepLast: 1, timeZone: ../../etc/passwd}", `spec.timeZone: unknown time zone "../../etc/passwd"`},
		{"{keepLast: 1, timeZone: Local}", `spec.timeZone: unknown time zone "Local"`},
		{"{keepWithin: 1w}", `spec.keepWithin: invalid calendar duration "1w": unknown unit 'w'`},
		{"{keepLast: 1, selector: 'a in (('}", "spec.selector: invalid label selector"},
		{"{keepLabels: ['']}", "spec.keepLabels[0]: invalid label selector \"\": empty selector"},
		{"{keepLast: 1, countPhases: [InProgress]}", `spec.countPhases[0]: "InProgress" is not a finished phase: use Completed, PartiallyFailed, Failed, FailedValidation`},
		{"{keepLast: 1, countPhases: []}", "spec.countPhases: empty"},
		{"{keepLast: 1, mode: enforced}", `spec.mode: invalid mode "enforced": use dryRun (plan only, the default) or enforce`},
		{"{keepLast: 1, deletionDelay: soon}", `spec.deletionDelay: invalid duration "soon"`},
		{"{keepLast: 1, failedRetention: -1h}", `spec.failedRetention: duration -1h0m0s is negative`},
		{"{keepLast: 1, overrideTTL: yes please}", "spec.overrideTTL: want true or false, got a string"},
		{"{keepLast: 1, groupBy: ['bad key!']}", `spec.groupBy[0]: invalid label key "bad key!"`},
		{"{keepLast: 0}", "spec: no keep rule: a policy without one would delete every backup it selects"},
		{"{selector: a=b}", "spec: no keep rule"},
	} {
		_, err := parse(t, "kind: RetentionPolicy\nmetadata: {name: p}\nspec: "+c.spec+"\n")
		require.Error(t, err, c.spec)
		require.Contains(t, err.Error(), c.want, c.spec)
		require.NotContains(t, err.Error(), "\n", c.spec)
	}
	_, err := parse(t, "kind: RetentionPolicy\nmetadata: {name: p}\n")
	require.ErrorContains(t, err, "spec: required: a RetentionPolicy needs at least one keep rule")
	_, err = parse(t, "kind: RetentionPolicy\nmetadata: {name: p, namespace: prod}\nspec: {keepLast: 1}\n")
	require.ErrorContains(t, err, "metadata.namespace: a RetentionPolicy is cluster-scoped")
	// Inside a bundle, the member is validated the same way.
	docs, err := parse(t, "kind: Bundle\nmetadata: {name: b}\nspec:\n  resources:\n  - name: p\n    object: {kind: RetentionPolicy, spec: {keepDaily: -5}}\n")
	require.NoError(t, err)
	_, err = manifest.ParseBundle(docs[0])
	require.ErrorContains(t, err, "spec.resources[0].object.spec.keepDaily: -5 is negative")
	require.False(t, strings.Contains(err.Error(), "\n"))
}

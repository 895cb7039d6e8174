package deletion_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/pkg/plugin"
)

// deleterWith is a second Deleter on the same catalog and storage, whose
// plugin folder holds only bins: the same backups, other plugins.
func (e *env) deleterWith(bins ...string) *deletion.Deleter {
	e.t.Helper()
	return e.deleterOn(func(h *pluginhost.Host) deletion.Plugins { return deletion.HostPlugins(h) }, bins...)
}

func (e *env) deleterOn(wrap func(*pluginhost.Host) deletion.Plugins, bins ...string) *deletion.Deleter {
	e.t.Helper()
	dir := e.t.TempDir()
	for _, b := range bins {
		require.NoError(e.t, os.Link(b, filepath.Join(dir, filepath.Base(b))))
	}
	h, err := pluginhost.New(&pluginhost.Config{Dir: dir, PluginEnv: e.envFor(bins)})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = h.Close() })
	d, err := deletion.New(&deletion.Config{Store: e.store, Blobs: e.blobs, Plugins: wrap(h), Now: e.clock, Holder: "other " + dir})
	require.NoError(e.t, err)
	return d
}

// envFor is the configured plugin environment of the binaries among bins
// (configuring one that is not installed is an error).
func (e *env) envFor(bins []string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, b := range bins {
		if v, ok := e.pluginEnv[filepath.Base(b)]; ok {
			out[filepath.Base(b)] = v
		}
	}
	return out
}

// registryWith is a registry on the same catalog and storage whose
// plugin folder holds only bins.
func registryWith(t *testing.T, e *env, bins ...string) *registry.Registry {
	t.Helper()
	dir := t.TempDir()
	for _, b := range bins {
		require.NoError(t, os.Link(b, filepath.Join(dir, filepath.Base(b))))
	}
	h, err := pluginhost.New(&pluginhost.Config{Dir: dir, PluginEnv: e.envFor(bins)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	reg, err := registry.New(&registry.Config{Store: e.store, Blobs: e.blobs, Plugins: h, Now: e.clock})
	require.NoError(t, err)
	return reg
}

// snapshot is what a refused deletion must leave unchanged.
type snapshot struct {
	version int64
	phase   catalog.Phase
	audit   int
}

func (e *env) snapshot(name string) snapshot {
	e.t.Helper()
	r, err := e.store.Get(e.ctx, backup.Key(name))
	require.NoError(e.t, err)
	entries, err := e.store.ListAudit(e.ctx, catalog.AuditFilter{Kind: backup.Kind, Name: name})
	require.NoError(e.t, err)
	return snapshot{version: r.ResourceVersion, phase: r.Phase, audit: len(entries)}
}

func (e *env) lastAudit(name string) catalog.AuditEntry {
	e.t.Helper()
	entries, err := e.store.ListAudit(e.ctx, catalog.AuditFilter{Kind: backup.Kind, Name: name})
	require.NoError(e.t, err)
	require.NotEmpty(e.t, entries)
	return entries[len(entries)-1]
}

// TestDeleteRefusesWhenAnExpectedPluginIsMissing is issue 8.1: a backup
// registered with the recorder installed cannot be deleted where it is
// not: one error naming the plugins, and nothing changes (no phase, no
// audit, no work item, no plugin call).
func TestDeleteRefusesWhenAnExpectedPluginIsMissing(t *testing.T) {
	e := newEnv(t)
	e.addBackup("b", items(30), archivetest.Options{}, nil)
	other := e.deleterWith(noopBin)
	before := e.snapshot("b")

	_, err := other.Delete(e.ctx, "b", deletion.Options{Force: true})
	var me *deletion.MissingPluginsError
	require.ErrorAs(t, err, &me)
	require.Equal(t, []string{pluginA, pluginB, pluginC}, me.Plugins())
	require.Contains(t, err.Error(), pluginC+" (10 items)")
	require.NotContains(t, err.Error(), "\n")
	require.Equal(t, before, e.snapshot("b"))
	work, err := e.store.Claim(e.ctx, deletion.Queue, "probe", time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, work, "no work item queued")

	plan, err := other.Plan(e.ctx, "b", deletion.Options{})
	require.NoError(t, err)
	require.Contains(t, plan.Rejected, "expected plugins not installed")

	// A deletion already running (requested for the daemon) is refused
	// the same way by Run.
	rep, err := other.Delete(e.ctx, "b", deletion.Options{Async: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultQueued, rep.Result)
	before = e.snapshot("b")
	_, err = other.Run(e.ctx, "b", deletion.Options{})
	require.ErrorAs(t, err, &me)
	require.Equal(t, before, e.snapshot("b"))
	require.Empty(t, e.lines(), "no plugin ran")

	// Where the plugins are installed, it runs.
	rep, err = e.del.Delete(e.ctx, "b", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
}

// TestRunWorkRefusalSetsPluginMissing: the daemon's path keeps the
// backup, records the condition naming the plugins, releases the work
// item for a later look, and runs it once the plugins are there.
func TestRunWorkRefusalSetsPluginMissing(t *testing.T) {
	e := newEnv(t)
	e.addBackup("b", items(9), archivetest.Options{}, nil)
	other := e.deleterWith(noopBin)
	_, err := other.Delete(e.ctx, "b", deletion.Options{Async: true})
	require.NoError(t, err)

	work, err := e.store.Claim(e.ctx, deletion.Queue, other.Holder(), time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, work, 1)
	_, err = other.RunWork(e.ctx, work[0], deletion.Options{})
	var me *deletion.MissingPluginsError
	require.ErrorAs(t, err, &me)
	r, err := e.store.Get(e.ctx, backup.Key("b"))
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, r.Phase)
	msg, ok := deletion.PluginMissing(r)
	require.True(t, ok, "%+v", r.Conditions)
	require.Contains(t, msg, pluginA)
	require.Empty(t, e.lines())

	// Where the plugins are, a run clears the condition, even one that
	// ends incomplete.
	fail := filepath.Join(e.blockDir, "item-0.fail")
	require.NoError(t, os.WriteFile(fail, nil, 0o600))
	rep, err := e.del.Run(e.ctx, "b", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	r, err = e.store.Get(e.ctx, backup.Key("b"))
	require.NoError(t, err)
	_, ok = deletion.PluginMissing(r)
	require.False(t, ok, "%+v", r.Conditions)
	require.NoError(t, os.Remove(fail))
	// The run left item-0 failed: it waits in the retry queue, which
	// runs the deletion again when it is due, so the work item itself is
	// parked. Nothing to claim now, nor after PluginMissingRetry.
	rows, err := e.del.Retry().List(e.ctx, catalog.RetryFilter{OwnerUID: r.UID})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, catalog.RetryRetryable, rows[0].State)
	e.now = e.now.Add(2*time.Minute + deletion.PluginMissingRetry)
	work, err = e.store.Claim(e.ctx, deletion.Queue, e.del.Holder(), time.Minute, 1)
	require.NoError(t, err)
	require.Empty(t, work, "parked: the retry queue decides")
	rep, err = e.del.Run(e.ctx, "b", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	e.requirePurged("b")
}

// TestSkipPluginNeedsAbandonAndIsAudited: a plugin gone for good is
// skipped only with the abandon path, and the audit records the items it
// would have received.
func TestSkipPluginNeedsAbandonAndIsAudited(t *testing.T) {
	e := newEnv(t)
	// Register with noop installed too, through a registry that sees both.
	e.pe.Registry = registryWith(t, e, recorderBin, noopBin)
	e.addBackup("b", items(12), archivetest.Options{}, nil)
	const noop = "lethe.io/noop"
	before := e.snapshot("b")

	for _, c := range []struct {
		opts deletion.Options
		want string
	}{
		{deletion.Options{SkipPlugins: []string{"noop"}}, "needs --abandon"},
		{deletion.Options{SkipPlugins: []string{pluginA}, ForcePurge: true}, "is installed"},
		{deletion.Options{SkipPlugins: []string{"example.com/other"}, ForcePurge: true}, "does not expect"},
	} {
		_, err := e.del.Delete(e.ctx, "b", c.opts)
		var se *deletion.SkipPluginError
		require.ErrorAs(t, err, &se, "%+v", c.opts)
		require.Contains(t, err.Error(), c.want)
		require.Equal(t, before, e.snapshot("b"))
	}
	_, err := e.del.Delete(e.ctx, "b", deletion.Options{})
	var me *deletion.MissingPluginsError
	require.ErrorAs(t, err, &me)
	require.Equal(t, []string{noop}, me.Plugins())

	rep, err := e.del.Delete(catalog.WithActor(e.ctx, "cli:alice"), "b", deletion.Options{SkipPlugins: []string{"noop"}, ForcePurge: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.True(t, rep.Forced)
	require.EqualValues(t, 12, rep.Skipped[noop].Items)
	e.requirePurged("b")
	last := e.lastAudit("b")
	require.Equal(t, "force-purge", last.Action)
	require.Contains(t, last.Reason, "12 items at skipped plugins lethe.io/noop")
	var details struct {
		Skipped   map[string]backup.ExpectedPlugin `json:"skippedPlugins"`
		Abandoned []string                         `json:"abandonedPlugins"`
	}
	require.NoError(t, json.Unmarshal(last.Details, &details), "%s", last.Details)
	require.EqualValues(t, 12, details.Skipped[noop].Items)
	require.Contains(t, details.Skipped[noop].Samples, "pods/ns-a/item-0")
	require.Equal(t, []string{noop}, details.Abandoned)
}

// TestNoPluginsMustBeSaid: with no plugin installed a deletion is refused
// unless NoPlugins says so, and that is audited; NoPlugins does not excuse
// a backup that expects plugins.
func TestNoPluginsMustBeSaid(t *testing.T) {
	e := newEnv(t)
	e.addBackup("expects", items(6), archivetest.Options{}, nil)
	e.pe.Registry = registryWith(t, e)
	e.addBackup("bare", items(6), archivetest.Options{}, nil)
	none := e.deleterWith()

	before := e.snapshot("bare")
	_, err := none.Delete(e.ctx, "bare", deletion.Options{})
	require.ErrorIs(t, err, deletion.ErrNoPlugins)
	require.Equal(t, before, e.snapshot("bare"))

	_, err = none.Delete(e.ctx, "expects", deletion.Options{NoPlugins: true})
	var me *deletion.MissingPluginsError
	require.ErrorAs(t, err, &me)

	rep, err := none.Delete(e.ctx, "bare", deletion.Options{NoPlugins: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	entries, err := e.store.ListAudit(e.ctx, catalog.AuditFilter{Kind: backup.Kind, Name: "bare"})
	require.NoError(t, err)
	var sawRequest bool
	for _, a := range entries {
		if a.Action == "delete" {
			sawRequest = true
			require.Contains(t, a.Reason, "--no-plugins")
		}
	}
	require.True(t, sawRequest)
	last := e.lastAudit("bare")
	require.Contains(t, string(last.Details), `"noPlugins":true`)
}

// TestNoPluginsWithPluginsInstalledClaimsNothing: --no-plugins given
// while plugins are loaded changes nothing, so the audit must not say "no
// plugin is installed" (it once did, whatever the plugin folder held), nor
// mark the purge as one without plugins.
func TestNoPluginsWithPluginsInstalledClaimsNothing(t *testing.T) {
	e := newEnv(t)
	e.addBackup("b", items(6), archivetest.Options{}, nil)
	require.NotEmpty(t, e.host.Plugins(), "the env's deleter has plugins loaded")

	rep, err := e.del.Delete(e.ctx, "b", deletion.Options{NoPlugins: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	entries, err := e.store.ListAudit(e.ctx, catalog.AuditFilter{Kind: backup.Kind, Name: "b"})
	require.NoError(t, err)
	var sawRequest bool
	for _, a := range entries {
		if a.Action == "delete" {
			sawRequest = true
			require.NotContains(t, a.Reason, "no plugin is installed")
		}
	}
	require.True(t, sawRequest)
	last := e.lastAudit("b")
	require.Equal(t, "purge", last.Action)
	require.NotContains(t, string(last.Details), "noPlugins")
}

// problems is the real host with a Problems list set by the test:
// discovery problems come from internal/pluginhost's own code, which its
// own tests cover; here only the deletion's decision is under test.
type problems struct {
	inner deletion.Plugins
	list  []pluginhost.Problem
}

func (p problems) Plugins() []pluginhost.Info { return p.inner.Plugins() }
func (p problems) Open(ctx context.Context, name string, b plugin.Backup, opts pluginhost.SessionOptions) (deletion.Session, error) {
	return p.inner.Open(ctx, name, b, opts)
}
func (p problems) Problems() []pluginhost.Problem { return p.list }

// TestPluginProblemsAndUnrecordedBackups: a broken plugin binary stops a
// backup whose expected plugins are not all loaded, or were never
// recorded (registered by an older Lethe); it does not stop a backup
// whose expected plugins all run.
func TestPluginProblemsAndUnrecordedBackups(t *testing.T) {
	e := newEnv(t)
	e.addBackup("recorded", items(6), archivetest.Options{}, nil)
	// An older backup: no expectedPlugins in its spec.
	e.addBackup("old", items(6), archivetest.Options{}, nil)
	r, err := e.store.Get(e.ctx, backup.Key("old"))
	require.NoError(t, err)
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	b.Spec.ExpectedPlugins = nil
	require.NoError(t, b.Encode())
	_, err = e.store.Update(e.ctx, r)
	require.NoError(t, err)

	broken := e.deleterOn(func(h *pluginhost.Host) deletion.Plugins {
		return problems{deletion.HostPlugins(h), []pluginhost.Problem{{Binary: "/p/ebs", Err: errors.New("handshake failed")}}}
	}, recorderBin)
	before := e.snapshot("old")
	_, err = broken.Delete(e.ctx, "old", deletion.Options{})
	var me *deletion.MissingPluginsError
	require.ErrorAs(t, err, &me)
	require.True(t, me.Unrecorded)
	require.Contains(t, err.Error(), "/p/ebs: handshake failed")
	require.Equal(t, before, e.snapshot("old"))

	rep, err := broken.Delete(e.ctx, "recorded", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)

	// Without problems, an older backup deletes with what is installed.
	rep, err = e.del.Delete(e.ctx, "old", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
}

// TestPluginsAddedAfterRegistration is issue 24.7: plugins installed
// after a backup's registration are named in a warning by the plan and
// the run; the failed items of such a plugin, removed since, can be
// skipped with --skip-plugin (with --abandon), audited as a skipped
// plugin, while another name is refused with one line and nothing
// changes.
func TestPluginsAddedAfterRegistration(t *testing.T) {
	e := newEnv(t)
	// Registered where only noop was installed: the recorder's three
	// plugins came later.
	e.pe.Registry = registryWith(t, e, noopBin)
	e.addBackup("b", items(9), archivetest.Options{}, nil)
	const noop = "lethe.io/noop"
	both := e.deleterWith(recorderBin, noopBin)

	plan, err := both.Plan(e.ctx, "b", deletion.Options{Force: true})
	require.NoError(t, err)
	require.Empty(t, plan.Rejected)
	require.Len(t, plan.Warnings, 3, "%q", plan.Warnings)
	require.Contains(t, plan.Warnings[0], "plugin "+pluginA+" was not installed when backup b was registered")
	require.Contains(t, plan.Warnings[0], "would receive 9 of its items")
	require.Contains(t, plan.Warnings[2], pluginC+" was not installed")
	for _, w := range plan.Warnings {
		require.NotContains(t, w, noop)
	}

	// a-first fails item-3, then the recorder is removed for good.
	require.NoError(t, os.WriteFile(filepath.Join(e.blockDir, "item-3.fail"), nil, 0o600))
	rep, err := both.Delete(e.ctx, "b", deletion.Options{Force: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result)
	require.Len(t, rep.Warnings, 3, "%q", rep.Warnings)
	require.Contains(t, rep.Warnings[0], pluginA+" was not installed when backup b was registered")
	require.Contains(t, rep.Warnings[0], "received 9 of its items")

	alone := e.deleterWith(noopBin)
	rep, err = alone.Run(e.ctx, "b", deletion.Options{})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultIncomplete, rep.Result, "a failed item at a removed plugin stays failed")
	require.Contains(t, rep.Unsettled[0].Message, "is not installed")
	before := e.snapshot("b")
	for _, c := range []struct {
		opts deletion.Options
		want string
	}{
		{deletion.Options{SkipPlugins: []string{pluginA}}, "needs --abandon"},
		{deletion.Options{SkipPlugins: []string{pluginB}, ForcePurge: true}, "none of its items is failed or blocked at it"},
		{deletion.Options{SkipPlugins: []string{noop}, ForcePurge: true}, "is installed"},
	} {
		_, err := alone.Run(e.ctx, "b", c.opts)
		var se *deletion.SkipPluginError
		require.ErrorAs(t, err, &se, "%+v", c.opts)
		require.Contains(t, err.Error(), c.want)
		require.NotContains(t, err.Error(), "\n")
		require.Equal(t, before, e.snapshot("b"))
	}

	plan, err = alone.Plan(e.ctx, "b", deletion.Options{SkipPlugins: []string{pluginA}, ForcePurge: true})
	require.NoError(t, err)
	require.Empty(t, plan.Rejected)
	require.EqualValues(t, 1, plan.Skipped[pluginA].Items)

	rep, err = alone.Run(catalog.WithActor(e.ctx, "cli:alice"), "b", deletion.Options{SkipPlugins: []string{pluginA}, ForcePurge: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.Zero(t, rep.UnsettledCount, "the skipped item is not abandoned as failed")
	require.EqualValues(t, 1, rep.Counts[pluginA].Skipped)
	require.EqualValues(t, 1, rep.Skipped[pluginA].Items)
	e.requirePurged("b")
	entries, err := e.store.ListAudit(e.ctx, catalog.AuditFilter{Kind: backup.Kind, Name: "b"})
	require.NoError(t, err)
	var last catalog.AuditEntry
	for _, en := range entries {
		if en.Action == "force-purge" {
			last = en
		}
	}
	require.Contains(t, last.Reason, "1 item at skipped plugins "+pluginA)
	var details struct {
		Skipped map[string]backup.ExpectedPlugin `json:"skippedPlugins"`
	}
	require.NoError(t, json.Unmarshal(last.Details, &details), "%s", last.Details)
	require.Equal(t, []string{"pods/ns-a/item-3"}, details.Skipped[pluginA].Samples)
}

// TestUnpinnedBinaryIsNamedInAWarning is issue 24.7: a binary added to a
// locked plugin folder is refused, and the plan and the run say that it
// receives none of the backup's items.
func TestUnpinnedBinaryIsNamedInAWarning(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	require.NoError(t, os.Link(recorderBin, filepath.Join(dir, "recorder")))
	_, err := pluginhost.WriteLock(dir, "")
	require.NoError(t, err)
	require.NoError(t, os.Link(noopBin, filepath.Join(dir, "noop")))
	e.addBackup("b", items(6), archivetest.Options{}, nil)
	h, err := pluginhost.New(&pluginhost.Config{Dir: dir, PluginEnv: e.envFor([]string{recorderBin})})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	d, err := deletion.New(&deletion.Config{Store: e.store, Blobs: e.blobs, Plugins: deletion.HostPlugins(h), Now: e.clock, Holder: "locked"})
	require.NoError(t, err)

	plan, err := d.Plan(e.ctx, "b", deletion.Options{Force: true})
	require.NoError(t, err)
	require.Len(t, plan.Warnings, 1, "%q", plan.Warnings)
	require.Contains(t, plan.Warnings[0], filepath.Join(dir, "noop")+" is not in the lock file")
	rep, err := d.Delete(e.ctx, "b", deletion.Options{Force: true})
	require.NoError(t, err)
	require.Equal(t, deletion.ResultPurged, rep.Result)
	require.Equal(t, plan.Warnings, rep.Warnings)
}

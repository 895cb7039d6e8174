package deletion

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/pkg/plugin"
)

// ConditionPluginMissing is set on a Deleting backup whose deletion the
// daemon refused to run because an expected plugin is missing.
const ConditionPluginMissing = "PluginMissing"

// PluginMissingRetry is how soon the daemon looks again at a deletion it
// refused for a missing plugin (another replica may have it, or the
// plugin may have been installed and the server restarted).
const PluginMissingRetry = 5 * time.Minute

// ErrNoPlugins refuses a deletion when no plugin is installed at all (an
// empty, or misnamed, plugin folder) and the operator did not say
// Options.NoPlugins: every item would be settled without any plugin.
var ErrNoPlugins = errors.New("no plugins are installed, so every item would be settled without running any plugin; " +
	"install the plugins, or say --no-plugins if that is really intended")

// MissingPluginsError refuses a deletion because plugins the backup
// expects (recorded at registration) are not installed or cannot start.
// Nothing changed.
type MissingPluginsError struct {
	Backup string
	// Missing are the expected plugins that are not loaded, with the
	// items each selects.
	Missing map[string]backup.ExpectedPlugin
	// Problems are the plugin binaries that could not be loaded.
	Problems []pluginhost.Problem
	// Unrecorded: the backup was registered before Lethe recorded its
	// expected plugins, so any plugin binary that cannot be loaded may
	// be one it needs.
	Unrecorded bool
}

// Plugins names the missing plugins, sorted.
func (e *MissingPluginsError) Plugins() []string { return slices.Sorted(maps.Keys(e.Missing)) }

func (e *MissingPluginsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backup %s: refusing to delete: ", e.Backup)
	if e.Unrecorded {
		b.WriteString("it was registered before Lethe recorded its expected plugins, and some plugin binaries cannot be loaded")
	} else {
		parts := make([]string, 0, len(e.Missing))
		for _, name := range e.Plugins() {
			parts = append(parts, fmt.Sprintf("%s (%s)", name, plural(int(e.Missing[name].Items), "item")))
		}
		b.WriteString("expected plugins not installed or not starting: " + strings.Join(parts, ", "))
	}
	if len(e.Problems) > 0 {
		parts := make([]string, len(e.Problems))
		for i, p := range e.Problems {
			parts[i] = p.Binary
			if p.Err != nil {
				parts[i] += ": " + p.Err.Error()
			}
		}
		b.WriteString("; plugin binaries that failed: " + strings.Join(parts, "; "))
	}
	b.WriteString("; install them, or skip a plugin gone for good with --skip-plugin NAME --abandon")
	return b.String()
}

// SkipPluginError is a --skip-plugin that names no plugin the backup is
// missing: bad input.
type SkipPluginError struct{ Err error }

func (e *SkipPluginError) Error() string { return e.Err.Error() }
func (e *SkipPluginError) Unwrap() error { return e.Err }

// CheckPlugins decides whether a deletion of b may start with the
// plugins this Deleter has. It refuses (changing nothing) when:
//   - no plugin is installed at all and opts.NoPlugins is not set
//     (ErrNoPlugins);
//   - a plugin the backup expects is not loaded and not named in
//     opts.SkipPlugins (*MissingPluginsError);
//   - the backup's expected plugins were never recorded (registered before
//     this check existed) and some plugin binary cannot be loaded: it may
//     be one the backup needs, so the safe answer is no
//     (*MissingPluginsError with Unrecorded);
//   - a --skip-plugin name is neither an expected plugin that is not
//     installed nor a plugin, installed after the backup's registration
//     and removed since, at which items of the backup are failed or
//     blocked (*SkipPluginError).
//
// A plugin binary that cannot be loaded but serves no plugin the backup
// expects does not stop it: duplicate names are refused at discovery, so
// when every expected plugin is loaded, no broken binary can be one of
// them.
func (d *Deleter) CheckPlugins(ctx context.Context, b *backup.Backup, opts Options) error {
	_, err := d.checkPlugins(ctx, b, opts)
	return err
}

// checkPlugins is CheckPlugins, returning the plugins the deletion skips
// with the items each would have received (see Options.skipped).
func (d *Deleter) checkPlugins(ctx context.Context, b *backup.Backup, opts Options) (map[string]backup.ExpectedPlugin, error) {
	infos, problems := d.cfg.Plugins.Plugins(), d.cfg.Plugins.Problems()
	installed := make(map[string]bool, len(infos))
	for _, in := range infos {
		installed[in.Name] = true
	}
	skip, err := d.skipSet(ctx, b, opts.SkipPlugins, installed)
	if err != nil {
		return nil, err
	}
	if len(skip) > 0 && !opts.ForcePurge {
		return nil, &SkipPluginError{errors.New("--skip-plugin abandons the items that plugin would have received, so it needs --abandon")}
	}
	if len(infos) == 0 && len(problems) == 0 && !opts.NoPlugins {
		return nil, fmt.Errorf("backup %s: refusing to delete: %w", b.Name(), ErrNoPlugins)
	}
	if !b.Spec.ExpectedRecorded() {
		if len(problems) > 0 {
			return nil, &MissingPluginsError{Backup: b.Name(), Problems: problems, Unrecorded: true}
		}
		return skip, nil
	}
	missing := map[string]backup.ExpectedPlugin{}
	for name, ep := range b.Spec.ExpectedPlugins {
		if _, skipped := skip[name]; !installed[name] && !skipped {
			missing[name] = ep
		}
	}
	if len(missing) > 0 {
		return nil, &MissingPluginsError{Backup: b.Name(), Missing: missing, Problems: problems}
	}
	return skip, nil
}

// skipSet checks --skip-plugin names, and returns the skipped plugins
// with the items each would have received. Each name must be a plugin
// that is not installed and either one the backup expects (recorded at
// registration: gone for good) or one at which items of the backup are
// failed or blocked (installed after the backup's registration, it
// failed them, and was removed since).
func (d *Deleter) skipSet(ctx context.Context, b *backup.Backup, names []string, installed map[string]bool) (map[string]backup.ExpectedPlugin, error) {
	skip := map[string]backup.ExpectedPlugin{}
	var late map[string]backup.ExpectedPlugin
	for _, raw := range names {
		name, err := plugin.NormalizeName(raw)
		if err != nil {
			return nil, &SkipPluginError{fmt.Errorf("--skip-plugin %q: %w", raw, err)}
		}
		if installed[name] {
			return nil, &SkipPluginError{fmt.Errorf("--skip-plugin %s: that plugin is installed, and runs; --skip-plugin is for a plugin gone for good", name)}
		}
		if ep, ok := b.Spec.ExpectedPlugins[name]; ok {
			skip[name] = ep
			continue
		}
		if late == nil {
			if late, err = d.unsettledByPlugin(ctx, b); err != nil {
				return nil, err
			}
		}
		ep, ok := late[name]
		if !ok {
			return nil, &SkipPluginError{fmt.Errorf("--skip-plugin %s: backup %s does not expect that plugin, and none of its items is failed or blocked at it "+
				"(lethe backup get %s shows the plugins it expects and its failed items)", name, b.Name(), b.Name())}
		}
		skip[name] = ep
	}
	return skip, nil
}

// unsettledByPlugin counts the backup's failed or blocked items by the
// plugin they are at, with sample item keys.
func (d *Deleter) unsettledByPlugin(ctx context.Context, b *backup.Backup) (map[string]backup.ExpectedPlugin, error) {
	out := map[string]backup.ExpectedPlugin{}
	_, rows, err := d.cfg.Store.LoadProgress(ctx, b.Resource.UID)
	if errors.Is(err, catalog.ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		ep := out[row.Plugin]
		ep.Items++
		if len(ep.Samples) < skipSamples {
			ep.Samples = append(ep.Samples, row.ItemKey)
		}
		out[row.Plugin] = ep
	}
	return out, nil
}

// skipSamples is how many item keys the audit of a skipped plugin keeps
// when they come from its failed items (registration records its own).
const skipSamples = 5

// skippedItems are the plugins a deletion skips, with the items each
// would have received: those checkPlugins found (Options.skipped), or,
// when it did not run, the expected plugins named by SkipPlugins.
func skippedItems(b *backup.Backup, opts Options) map[string]backup.ExpectedPlugin {
	if opts.skipped != nil {
		return opts.skipped
	}
	out := map[string]backup.ExpectedPlugin{}
	for _, raw := range opts.SkipPlugins {
		if name, err := plugin.NormalizeName(raw); err == nil {
			if ep, ok := b.Spec.ExpectedPlugins[name]; ok {
				out[name] = ep
			}
		}
	}
	return out
}

// auditCoverage adds to a purge's audit details what the operator chose
// about plugins: --no-plugins (when it was needed: no plugin is loaded;
// with plugins loaded it changes nothing and is not claimed), the
// skipped plugins with the items they would have received (count and
// sample ids), and the plugins of the abandoned items. Items at a
// skipped plugin are never settled by it, so the purge is a forced one.
// It returns a phrase for the audit reason.
func (d *Deleter) auditCoverage(b *backup.Backup, rep *Report, opts Options, info map[string]any) string {
	if opts.NoPlugins && len(d.cfg.Plugins.Plugins()) == 0 {
		info["noPlugins"] = true
	}
	var phrase string
	if sk := skippedItems(b, opts); len(sk) > 0 {
		info["skippedPlugins"] = sk
		rep.Skipped = sk
		var n int64
		for _, ep := range sk {
			n += ep.Items
		}
		rep.Forced = true
		phrase = fmt.Sprintf(", and %s at skipped plugins %s", plural(int(n), "item"), strings.Join(slices.Sorted(maps.Keys(sk)), ", "))
	}
	if rep.Forced {
		var plugins []string
		for _, o := range rep.Unsettled {
			if !slices.Contains(plugins, o.Plugin) {
				plugins = append(plugins, o.Plugin)
			}
		}
		for name := range rep.Skipped {
			if !slices.Contains(plugins, name) {
				plugins = append(plugins, name)
			}
		}
		slices.Sort(plugins)
		info["abandonedPlugins"] = plugins
	}
	return phrase
}

// refusePlugins records, for the daemon, why a claimed deletion does not
// run: the PluginMissing condition on the backup, naming the plugins, and
// the work item released for a later look. It returns err.
func (d *Deleter) refusePlugins(ctx context.Context, b *backup.Backup, w *catalog.WorkItem, err error) error {
	bg := context.WithoutCancel(ctx)
	d.setPluginCondition(bg, b.Resource, err)
	if rerr := d.cfg.Store.Release(bg, w.Fence(), d.now().Add(PluginMissingRetry), err.Error()); rerr != nil && !errors.Is(rerr, catalog.ErrLeaseLost) {
		d.log.Warn("releasing work item", "backup", b.Name(), "error", rerr)
	}
	return err
}

// setPluginCondition sets (err != nil) or clears the PluginMissing
// condition; it writes only when the condition changes.
func (d *Deleter) setPluginCondition(ctx context.Context, r *catalog.Resource, err error) {
	want := catalog.Condition{Type: ConditionPluginMissing, Status: "False", Reason: "PluginsInstalled", LastTransitionTime: d.now()}
	if err != nil {
		want.Status, want.Reason, want.Message = "True", "PluginMissing", err.Error()
		var me *MissingPluginsError
		if errors.As(err, &me) && me.Unrecorded {
			want.Reason = "PluginProblems"
		} else if errors.Is(err, ErrNoPlugins) {
			want.Reason = "NoPlugins"
		}
	}
	d.recordCondition(ctx, r, want, err != nil)
}

// PluginMissing returns the message of a backup's PluginMissing
// condition when it is set, for views.
func PluginMissing(r *catalog.Resource) (string, bool) {
	for _, c := range r.Conditions {
		if c.Type == ConditionPluginMissing && c.Status == "True" {
			return cmp.Or(c.Message, c.Reason), true
		}
	}
	return "", false
}

// Check runs the plugin check of a deletion request for the named backup
// (see startCheck): the CLI asks before any question, so that a refusal
// comes first and changes nothing.
func (d *Deleter) Check(ctx context.Context, name string, opts Options) error {
	b, err := d.get(ctx, name)
	if err != nil {
		return err
	}
	if err := checkFinished(b); err != nil {
		return err
	}
	if err := d.checkBlocked(ctx, b.Resource, opts); err != nil {
		return err
	}
	_, err = d.startCheck(ctx, b, opts)
	return err
}

// startCheck is CheckPlugins for a deletion request, when the request
// would start the deletion here and now. A request that only queues the
// deletion for the daemon (Async) or schedules it in a grace window is
// not checked: the process that runs it later checks with its own
// plugins (Run, RunWork).
func (d *Deleter) startCheck(ctx context.Context, b *backup.Backup, opts Options) (map[string]backup.ExpectedPlugin, error) {
	if opts.Async || d.wouldSchedule(b, opts) {
		return nil, nil
	}
	return d.checkPlugins(ctx, b, opts)
}

// wouldSchedule reports whether a request leaves the backup in its grace
// window, as request decides.
func (d *Deleter) wouldSchedule(b *backup.Backup, opts Options) bool {
	r := b.Resource
	if opts.Force {
		return false
	}
	switch r.Phase {
	case catalog.PhaseActive:
		delay := opts.DefaultDelay
		if opts.Delay != nil {
			delay = *opts.Delay
		} else if dd, err := backup.DeletionDelay(r, opts.DefaultDelay); err == nil {
			delay = dd
		}
		return delay > 0
	case catalog.PhaseScheduled:
		return r.DeletionDueAt != nil && d.now().Before(*r.DeletionDueAt)
	}
	return false
}

// pluginWarnings names, for a deletion of b, the plugins that see (or
// would see) its items although they were not installed when it was
// registered (not among its expected plugins), with how many, and the
// plugin binaries that the lock file does not list: they are refused, so
// they see none of its items. items counts the items by plugin; verb is
// "would receive" for a plan, "received" for a run. A backup whose
// expected plugins were never recorded gets no warning of the first kind:
// nothing says which plugins it had.
func (d *Deleter) pluginWarnings(b *backup.Backup, items map[string]int64, verb string) []string {
	var out []string
	if b.Spec.ExpectedRecorded() {
		for _, name := range slices.Sorted(maps.Keys(items)) {
			if _, expected := b.Spec.ExpectedPlugins[name]; expected || items[name] == 0 {
				continue
			}
			out = append(out, fmt.Sprintf("plugin %s was not installed when backup %s was registered (it is not among its expected plugins), and %s %d of its items",
				name, b.Name(), verb, items[name]))
		}
	}
	for _, p := range d.cfg.Plugins.Problems() {
		var ue *pluginhost.UnpinnedError
		if errors.As(p.Err, &ue) {
			out = append(out, fmt.Sprintf("plugin binary %s is not in the lock file %s, so it is refused and receives none of backup %s's items (run `lethe plugin lock` if it should)",
				ue.Binary, ue.Lock, b.Name()))
		}
	}
	return out
}

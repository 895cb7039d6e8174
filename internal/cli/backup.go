package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/registry"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

func newBackupCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "backup",
		Short: "Create, list, inspect, delete and undelete backups",
		Long: `A backup is a tarball in Velero's layout plus a record in Lethe's catalog.
Deleting it runs every matching plugin on every item of the tarball, then
removes the tarball and the record.`,
	}
	groupCmd(c)
	c.AddCommand(newBackupCreateCmd(a), newBackupListCmd(a), newBackupGetCmd(a),
		newBackupDeleteCmd(a), newBackupUndeleteCmd(a), newBackupSyncCmd(a))
	return c
}

func newBackupCreateCmd(a *app) *cobra.Command {
	var from, ttl, delay string
	var labels []string
	c := &cobra.Command{
		Use:   "create NAME --from FILE",
		Short: "Register a backup tarball: store it and add it to the catalog",
		Long: `Create validates a Velero-layout tarball (gzip or zstd), copies it into the
backup storage and records it in the catalog. A tarball that is hostile
(path traversal, links, bombs, oversized or duplicate entries) or corrupt is
refused, and nothing is stored.

In the same pass, create records the backup's expected plugins: which
installed plugins select how many of its items. A deletion refuses to start
while one of them is missing. So plugins must load: if a plugin binary in
the plugin folder cannot be loaded, create refuses (exit 5) rather than
record an incomplete set. With no plugin installed, nothing is expected.

NAME: lowercase letters, digits, '-' and '.', at most 63 characters.
Labels follow Kubernetes' syntax. A gzip tarball is stored as
backups/NAME/NAME.tar.gz, a zstd one as backups/NAME/NAME.tar.zst, whatever
the file is called.

Until the backup is in the catalog, create keeps a marker beside the
tarball, backups/NAME/lethe-upload.json, so that a storage sync ('backup
sync', or lethe server's) leaves the upload to it instead of importing it
without its TTL. A create that was killed leaves the marker behind: the
sync then skips the folder and says so; remove the marker to import it.`,
		Example: `  lethe backup create nightly-0412 --from ./nightly-0412.tar.gz
  lethe backup create weekly-17 --from weekly-17.tar.gz --ttl 30d --deletion-delay 24h --labels team=db,env=prod`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := registry.Request{Name: args[0], Labels: map[string]string{}, Annotations: map[string]string{}, Source: from}
			for _, l := range labels {
				// A label value has no comma: a=b,c=d is two labels.
				for pair := range strings.SplitSeq(l, ",") {
					k, v, ok := strings.Cut(pair, "=")
					if !ok || k == "" {
						return usageError{fmt.Errorf("--labels %s: use key=value[,key=value...]", termtext.Quote(l))}
					}
					if _, dup := req.Labels[k]; dup {
						return usageError{fmt.Errorf("--labels: label %s given twice", termtext.Quote(k))}
					}
					req.Labels[k] = v
				}
			}
			if err := registry.CheckInput(req.Name, req.Labels); err != nil {
				return usageError{err}
			}
			if from == "" {
				return usageError{errors.New("--from FILE is required: the backup tarball to register")}
			}
			if ttl != "" {
				d, err := backup.ParseDuration(ttl)
				if err != nil {
					return usageError{fmt.Errorf("--ttl: %w", err)}
				}
				if d == 0 {
					return usageError{fmt.Errorf("--ttl %s: a zero TTL would expire at once; leave --ttl out for a backup that never expires", ttl)}
				}
				req.TTL = d
			}
			if delay != "" {
				if _, err := backup.ParseDuration(delay); err != nil {
					return usageError{fmt.Errorf("--deletion-delay: %w", err)}
				}
				req.Annotations[catalog.AnnotationDeletionDelay] = delay
			}
			return a.createBackup(cmd.Context(), req)
		},
	}
	c.Flags().StringVar(&from, "from", "", "the backup tarball (Velero layout, .tar.gz or .tar.zst)")
	c.Flags().StringVar(&ttl, "ttl", "", "time to live, e.g. 720h or 30d; the daemon deletes the backup when it expires (leave out: never expires; 0 is refused)")
	c.Flags().StringVar(&delay, "deletion-delay", "", "grace window before a requested deletion runs, e.g. 24h (sets the lethe.io/deletion-delay annotation)")
	// -l is -l/--selector wherever it appears; labels are --labels, as
	// Velero's (a=b,c=d), or --label k=v.
	c.Flags().StringArrayVar(&labels, "labels", nil, "labels to set, key=value[,key=value...] in Kubernetes syntax (repeatable)")
	c.Flags().StringArrayVar(&labels, "label", nil, "one label key=value (repeatable); as --labels")
	return c
}

// registry opens what registration needs: the catalog, the storage and
// the plugins (to record the expected plugins).
func (a *app) registry(ctx context.Context) (*registry.Registry, error) {
	st, err := a.catalog(ctx)
	if err != nil {
		return nil, err
	}
	bl, err := a.storage(ctx)
	if err != nil {
		return nil, err
	}
	h, err := a.plugins(ctx)
	if err != nil {
		return nil, err
	}
	set, err := a.locationSet()
	if err != nil {
		return nil, err
	}
	return registry.New(&registry.Config{Store: st, Blobs: bl, Plugins: h, LocationName: set.Default().Name})
}

func (a *app) createBackup(ctx context.Context, req registry.Request) error {
	f, err := os.Open(req.Source)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("--from %s is a folder, not a tarball", termtext.Quote(req.Source))
	}
	reg, err := a.registry(ctx)
	if err != nil {
		return err
	}
	req.Tarball = f
	bar := a.newBar(fi.Size(), "checking "+req.Name, "bytes", outTable)
	if bar != nil {
		req.Tarball = &barReader{rs: f, bar: bar, name: req.Name}
	}
	res, err := reg.Create(ctx, req)
	if bar != nil {
		_ = bar.Finish()
	}
	var ie *registry.InputError
	if errors.As(err, &ie) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	b := res.Backup
	fmt.Fprintf(a.s.Out, "backup %s created: %s, %s, stored at %s\n", termtext.Quote(b.Name()), counted(b.Spec.Items, "item", "items"), humanBytes(b.Spec.Size), termtext.Quote(res.Location))
	for _, w := range res.Warnings {
		if !termtext.Plain(w) {
			w = termtext.Quote(w)
		}
		fmt.Fprintf(a.s.Err, "Warning: %s\n", w)
	}
	if len(a.host.Plugins()) == 0 {
		fmt.Fprintf(a.s.Err, "Warning: no plugins are installed in %s, so none is expected for this backup; its deletion will need --no-plugins.\n", termtext.Quote(a.g.pluginDir))
	}
	return nil
}

func (a *app) backupView(ctx context.Context, r *catalog.Resource, withRows bool) (*view.Backup, error) {
	return view.NewBackup(ctx, a.store, r, withRows)
}

// phaseText is the PHASE column: the phase, the time left in the grace
// window, or the deletion's progress, then any condition that stops the
// deletion (e.g. "Deleting (0/3) TarballMissing").
func phaseText(v *view.Backup, now time.Time) string {
	return phaseProgress(v, now) + blockingConditions(v.Conditions)
}

// blockingConditions lists, after a space each, the True conditions worth
// a glance in a table (TarballMissing, ...); DeletionStuck is already told
// by the unsettled count.
func blockingConditions(cs []catalog.Condition) string {
	var s string
	for _, c := range cs {
		if c.Status == "True" && c.Type != "DeletionStuck" {
			s += " " + c.Type
		}
	}
	return s
}

func phaseProgress(v *view.Backup, now time.Time) string {
	switch v.Phase {
	case catalog.PhaseScheduled:
		if v.DueAt != nil {
			left := v.DueAt.Sub(now)
			if left <= 0 {
				return "Scheduled (due now)"
			}
			return "Scheduled (" + human(left) + " left)"
		}
	case catalog.PhaseDeleting:
		if p := v.Progress; p != nil {
			var unsettled int64
			for _, c := range p.Counts {
				unsettled += c.Failed + c.Blocked
			}
			s := fmt.Sprintf("Deleting (%d/%d", p.Watermark, p.TotalItems)
			if unsettled > 0 {
				s += fmt.Sprintf(", %d unsettled", unsettled)
			}
			return s + ")"
		}
	}
	return string(v.Phase)
}

func newBackupListCmd(a *app) *cobra.Command {
	var selector string
	c := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List backups with their phase, size, expiry and deletion progress",
		Long: `List shows every backup with its phase (and, while Deleting, its progress),
item count, size, age and expiry. -w/--watch lists, then prints each change
as it happens, until interrupted (as lethe get backups -w).`,
		Example: `  lethe backup list
  lethe backup list -l team=db -o json
  lethe backup list -w`,
		Args: exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.Flags().StringVarP(&selector, "selector", "l", "", "label selector, e.g. team=db,env!=dev")
	var w watchFlags
	w.add(c)
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		ctx := cmd.Context()
		a.fileWake = w.on() // before the catalog opens: see catalog.Config.FileWake
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		if err := checkSelector(selector); err != nil {
			return err
		}
		var from int64
		if w.on() {
			if from, err = st.CurrentVersion(ctx); err != nil {
				return err
			}
		}
		rs, err := listAll(ctx, st, catalog.ListOptions{Kind: backup.Kind, LabelSelector: selector})
		if err != nil {
			return err
		}
		var views []*view.Backup
		for _, r := range rs {
			// One record that cannot be read (written into the catalog by
			// hand) is left out with a warning; the others are listed.
			if _, err := backup.FromResource(r); err != nil {
				fmt.Fprintf(a.s.Err, "Warning: left out of the list: %s\n", termtext.Quote(oneLineErr(err)))
				continue
			}
			v, err := a.backupView(ctx, r, false)
			if err != nil {
				return err
			}
			views = append(views, v)
		}
		if w.on() {
			return a.watchBackups(ctx, st, *out, from, selector, views, w.only)
		}
		if structured(*out) {
			return printList(a.s.Out, *out, backup.Kind, view.BackupObjects(views))
		}
		if len(views) == 0 {
			fmt.Fprintln(a.s.Out, "No backups. Register one with: lethe backup create NAME --from FILE.tar.gz")
			return nil
		}
		now := time.Now()
		t := newTable(a.s.Out, backupHeaders(*out == outWide)...)
		for _, v := range views {
			t.row(backupRow(v, *out == outWide, now)...)
		}
		return t.flush()
	}
	return c
}

// backupHeaders are backup list's columns (-o wide: more of them).
func backupHeaders(wide bool) []string {
	headers := []string{"NAME", "PHASE", "ITEMS", "SIZE", "AGE", "EXPIRES"}
	if wide {
		headers = append(headers, "LABELS", "LOCATION")
	}
	return headers
}

// row is the backup's row in backup list's table.
func backupRow(v *view.Backup, wide bool, now time.Time) []string {
	exp := "never"
	if v.Spec.ExpiresAt != nil {
		exp = "in " + human(v.Spec.ExpiresAt.Sub(now))
		if v.Spec.ExpiresAt.Before(now) {
			exp = "expired " + human(now.Sub(*v.Spec.ExpiresAt)) + " ago"
		}
	}
	row := []string{termtext.Quote(v.Name), termtext.Quote(phaseText(v, now)), fmt.Sprint(v.Spec.Items), humanBytes(v.Spec.Size), human(now.Sub(v.CreatedAt)), exp}
	if wide {
		row = append(row, dash(joinMap(v.Labels)), termtext.Quote(dash(v.Spec.StorageLocation)))
	}
	return row
}

// watchBackups is backup list -w: the listing (unless only), then each
// change of a backup the selector selects.
func (a *app) watchBackups(ctx context.Context, st catalog.Store, format string, from int64, selector string, views []*view.Backup, only bool) error {
	f, err := newWatchFilter("", "", selector)
	if err != nil {
		return err
	}
	if only {
		views = nil
	}
	wide := format == outWide
	t := &streamTable{w: a.s.Out}
	var items []*catalog.Resource
	if structured(format) {
		for _, v := range views {
			items = append(items, v.Resource)
		}
	} else {
		rows := [][]string{backupHeaders(wide)}
		for _, v := range views {
			rows = append(rows, backupRow(v, wide, time.Now()))
		}
		if err := t.print(rows...); err != nil {
			return err
		}
	}
	return a.watchFrom(ctx, st, backup.Kind, from, f, items, func(typ string, r *catalog.Resource, purged bool) error {
		v, err := a.backupView(ctx, purgedCopy(r, purged && !structured(format)), false)
		if err != nil {
			return err
		}
		if !structured(format) {
			return t.print(backupRow(v, wide, time.Now()))
		}
		obj, err := view.ToObject(backup.Kind, v.Object())
		if err != nil {
			return err
		}
		return printWatchEvent(a.s.Out, format, typ, obj)
	})
}

func newBackupGetCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:     "get [NAME...]",
		Aliases: []string{"describe"},
		Short:   "Show backups: their phase, storage, and what their deletion did so far (alias: describe); with no name, list them",
		Example: `  lethe backup get nightly-0412
  lethe backup describe nightly-0412
  lethe backup describe nightly-0412 --details
  lethe backup get nightly-0412 -o yaml
  lethe backup get nightly-0412 nightly-0413
  lethe backup get
  lethe backup get -l app=shop`,
		Args: cobra.ArbitraryArgs,
	}
	out := outputFlag(c, "table")
	var selector string
	c.Flags().StringVarP(&selector, "selector", "l", "", "with no NAME: list the backups this label selector selects, as backup list -l (e.g. team=db,env!=dev); not with NAME")
	details := c.Flags().Bool("details", false, fmt.Sprintf("describe one backup in full, as velero backup describe --details: also its resource list read from its tarball (at most %d names per resource type, then '… and N more'), its native volume snapshots, and each plugin's item outcomes once a deletion ran (at most %d unsettled items each); -o json|yaml prints a %s", backup.DefaultDetailNames, backup.DefaultDetailNames, BackupDescriptionKind))
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		if err := checkNameAndSelector(len(args) > 0, selector); err != nil {
			return err
		}
		if *details && len(args) != 1 {
			return usageError{errors.New("--details describes one backup: give its NAME")}
		}
		if len(args) != 1 {
			return a.backupGetMany(cmd, args, selector, *out) // as velero backup get
		}
		if err := backup.ValidateName(args[0]); err != nil {
			return usageError{err}
		}
		ctx := cmd.Context()
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		r, err := backup.Get(ctx, st, backup.Key(args[0]))
		if err != nil {
			return err
		}
		v, err := a.backupView(ctx, r, true)
		if err != nil {
			return err
		}
		if *details {
			return a.describeBackupDetails(ctx, v, *out)
		}
		if structured(*out) {
			return printObject(a.s.Out, *out, backup.Kind, v.Object())
		}
		a.printBackup(v)
		return nil
	}
	return c
}

func (a *app) printBackup(v *view.Backup) {
	w := a.s.Out
	now := time.Now()
	fmt.Fprintf(w, "Name:       %s\n", termtext.Quote(v.Name))
	fmt.Fprintf(w, "UID:        %s\n", termtext.Quote(v.UID))
	fmt.Fprintf(w, "Phase:      %s\n", termtext.Quote(phaseText(v, now)))
	fmt.Fprintf(w, "Created:    %s (%s ago)\n", v.CreatedAt.Local().Format(time.RFC3339), human(now.Sub(v.CreatedAt)))
	// Where the tarball is: in the recorded storage location, which
	// deletion uses whatever --storage says now.
	tarball := v.Spec.StorageKey
	if v.Spec.StorageLocation != "" {
		tarball = v.Spec.StorageLocation + "/" + tarball
	}
	fmt.Fprintf(w, "Tarball:    %s (%s, %s, sha256 %s)\n", termtext.Quote(tarball), counted(v.Spec.Items, "item", "items"), humanBytes(v.Spec.Size), termtext.Quote(shortDigest(v.Spec.Digest)))
	switch {
	case !v.Spec.ExpectedRecorded():
		fmt.Fprintf(w, "Plugins:    expected plugins not recorded (registered by an older Lethe)\n")
	case len(v.Spec.ExpectedPlugins) == 0:
		fmt.Fprintf(w, "Plugins:    none expected (no installed plugin selected an item at registration)\n")
	default:
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(v.Spec.ExpectedPlugins)) {
			parts = append(parts, fmt.Sprintf("%s (%s)", termtext.Quote(name), counted(v.Spec.ExpectedPlugins[name].Items, "item", "items")))
		}
		fmt.Fprintf(w, "Plugins:    expected %s\n", strings.Join(parts, ", "))
	}
	if v.Spec.ExpiresAt != nil {
		fmt.Fprintf(w, "Expires:    %s (TTL %s)\n", v.Spec.ExpiresAt.Local().Format(time.RFC3339), time.Duration(v.Spec.TTL))
	}
	if d, ok := v.Annotations[catalog.AnnotationDeletionDelay]; ok {
		fmt.Fprintf(w, "Grace:      %s\n", termtext.Quote(d))
	}
	if len(v.Labels) > 0 {
		fmt.Fprintf(w, "Labels:     %s\n", joinMap(v.Labels))
	}
	if vi := v.Spec.Velero; vi != nil {
		fmt.Fprintf(w, "Velero:     phase %s, storage location %s, namespaces %s (from %s)\n", termtext.Quote(cmp.Or(vi.Phase, "-")),
			termtext.Quote(cmp.Or(vi.StorageLocation, "-")), cmp.Or(strings.Join(quoteAll(vi.IncludedNamespaces), ","), "*"), termtext.Quote(vi.MetadataKey))
	}
	if vs := v.Spec.VolumeSnapshots; vs != nil && vs.Key != "" {
		fmt.Fprintf(w, "Snapshots:  %s, items after the tarball's (from %s)\n", counted(vs.Count, "native volume snapshot", "native volume snapshots"), termtext.Quote(vs.Key))
	}
	if v.DueAt != nil {
		fmt.Fprintf(w, "Deletion:   due %s; undo with: lethe backup undelete %s\n", v.DueAt.Local().Format(time.RFC3339), termtext.Quote(v.Name))
	}
	if v.DeletingAt != nil {
		fmt.Fprintf(w, "Deleting:   since %s; finalizers: %s\n", v.DeletingAt.Local().Format(time.RFC3339), cmp.Or(strings.Join(quoteAll(v.Finalizers), ", "), "none"))
		if d := v.Status.Deletion; d != nil && len(d.WaitingFor) > 0 && !slices.Contains(v.Finalizers, catalog.FinalizerDeleteActions) {
			fmt.Fprintf(w, "Waiting:    its items are settled; its purge waits for %s (lethe explain backup %s)\n", strings.Join(quoteAll(d.WaitingFor), "; "), termtext.Quote(v.Name))
		}
	}
	if v.Resource != nil && v.Resource.DeletionRoot != nil {
		root := v.Resource.DeletionRoot
		fmt.Fprintf(w, "Cascade of: %s %s (the requested deletion whose cascade reached this backup)\n", keyText(root.Key()), termtext.Quote(root.UID))
	}
	if p := v.Progress; p != nil {
		fmt.Fprintf(w, "Progress:   %d of %s processed\n", p.Watermark, counted(p.TotalItems, "item", "items"))
		t := newTable(w, "  PLUGIN", "DONE", "SKIPPED", "FAILED", "BLOCKED")
		for _, name := range slices.Sorted(maps.Keys(p.Counts)) {
			c := p.Counts[name]
			t.row("  "+termtext.Quote(name), fmt.Sprint(c.Done), fmt.Sprint(c.Skipped), fmt.Sprint(c.Failed), fmt.Sprint(c.Blocked))
		}
		_ = t.flush()
	}
	if len(v.Unsettled) > 0 {
		fmt.Fprintf(w, "Unsettled items (%d); run 'lethe backup delete %s' again to retry them:\n", len(v.Unsettled), termtext.Quote(v.Name))
		for i, o := range v.Unsettled {
			if i == 20 {
				fmt.Fprintf(w, "  ... and %d more (-o json lists all)\n", len(v.Unsettled)-20)
				break
			}
			fmt.Fprintf(w, "  %s (attempts %d)\n", outcomeText(o), o.Attempts)
		}
	}
	if rs := v.Retry; rs != nil {
		next := "none automatic"
		if rs.NextAttemptAt != nil {
			next = rs.NextAttemptAt.Local().Format(time.RFC3339) + " (in " + human(max(rs.NextAttemptAt.Sub(now), 0)) + ")"
		}
		fmt.Fprintf(w, "Retry:      next attempt %s; %d waiting, %d running, %d discarded (lethe retry list)\n", next, rs.Waiting, rs.Running, rs.Discarded)
	}
	for _, c := range v.Conditions {
		fmt.Fprintf(w, "Condition:  %s\n", conditionText(c))
	}
}

// retrySummary reads the backup's rows of the retry queue (nil: none).
// joinMap shows labels or annotations: k=v,k=v, each pair quoted when
// it is not plain text.
func joinMap(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, termtext.Quote(k+"="+m[k]))
	}
	return strings.Join(parts, ",")
}

// conditionText shows a condition: Type=Status Reason Message.
func conditionText(c catalog.Condition) string {
	return termtext.Quote(c.Type + "=" + c.Status + " " + c.Reason + " " + c.Message)
}

func shortDigest(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == n {
			return nil
		}
		if n == 0 {
			return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
		}
		if len(args) < n {
			return usageError{fmt.Errorf("%s needs %s", cmd.CommandPath(), names)}
		}
		return usageError{fmt.Errorf("%s takes only %s, got %d arguments", cmd.CommandPath(), names, len(args))}
	}
}

// confirm asks a yes/no question on a terminal. Without a terminal it
// refuses, so that scripts must say --yes.
func (a *app) confirm(question string) (bool, error) {
	if !a.s.InteractiveIn {
		return false, usageError{errors.New("refusing to delete without confirmation: stdin is not a terminal; pass --yes")}
	}
	fmt.Fprintf(a.s.Err, "%s [y/N] ", question)
	line, err := bufio.NewReader(a.s.In).ReadString('\n')
	if err != nil && line == "" {
		return false, nil
	}
	ans := strings.ToLower(strings.TrimSpace(line))
	return ans == "y" || ans == "yes", nil
}

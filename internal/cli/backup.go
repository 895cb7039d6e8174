package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
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
refused, and nothing is stored.`,
		Example: `  lethe backup create nightly-0412 --from ./nightly-0412.tar.gz
  lethe backup create weekly-17 --from weekly-17.tar.gz --ttl 30d --deletion-delay 24h -l team=db`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := backup.ValidateName(name); err != nil {
				return usageError{err}
			}
			if from == "" {
				return usageError{errors.New("--from FILE is required: the backup tarball to register")}
			}
			var spec backup.Spec
			res := &catalog.Resource{Kind: backup.Kind, Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}
			if ttl != "" {
				d, err := backup.ParseDuration(ttl)
				if err != nil {
					return usageError{fmt.Errorf("--ttl: %w", err)}
				}
				spec.TTL = backup.Duration(d)
			}
			if delay != "" {
				if _, err := backup.ParseDuration(delay); err != nil {
					return usageError{fmt.Errorf("--deletion-delay: %w", err)}
				}
				res.Annotations[catalog.AnnotationDeletionDelay] = delay
			}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" {
					return usageError{fmt.Errorf("--label %q: use key=value", l)}
				}
				res.Labels[k] = v
			}
			return a.createBackup(cmd.Context(), res, spec, from)
		},
	}
	c.Flags().StringVar(&from, "from", "", "the backup tarball (Velero layout, .tar.gz or .tar.zst)")
	c.Flags().StringVar(&ttl, "ttl", "", "time to live, e.g. 720h or 30d; the daemon deletes the backup when it expires")
	c.Flags().StringVar(&delay, "deletion-delay", "", "grace window before a requested deletion runs, e.g. 24h (sets the lethe.io/deletion-delay annotation)")
	c.Flags().StringArrayVarP(&labels, "label", "l", nil, "label key=value (repeatable)")
	return c
}

func (a *app) createBackup(ctx context.Context, res *catalog.Resource, spec backup.Spec, from string) error {
	name := res.Name
	st, err := a.catalog(ctx)
	if err != nil {
		return err
	}
	bl, err := a.storage(ctx)
	if err != nil {
		return err
	}
	if _, err := st.Get(ctx, res.Key()); err == nil {
		return fmt.Errorf("backup %q already exists", name)
	} else if !errors.Is(err, catalog.ErrNotFound) {
		return err
	}
	f, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("--from %s is a folder, not a tarball", from)
	}
	sum, err := archive.Validate(f, archive.Limits{})
	if err != nil {
		return fmt.Errorf("%s rejected: %w", from, err)
	}
	key := backup.StorageKey(name)
	if _, err := bl.Stat(ctx, key); err == nil {
		return fmt.Errorf("storage already holds a tarball for %q at %s/%s; run 'lethe backup sync' to import it", name, bl.URL(), key)
	} else if !errors.Is(err, blobstore.ErrNotFound) {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := bl.Put(ctx, key, f); err != nil {
		return fmt.Errorf("storing tarball: %w", err)
	}
	now := time.Now().UTC()
	spec.StorageKey, spec.Size, spec.Digest, spec.Items, spec.CopyOnlyItems = key, fi.Size(), sum.Digest, sum.Items, sum.CopyOnlyItems
	if spec.TTL > 0 {
		exp := now.Add(time.Duration(spec.TTL))
		spec.ExpiresAt = &exp
	}
	b := &backup.Backup{Resource: res, Spec: spec}
	if err := b.Encode(); err != nil {
		return err
	}
	if _, err := st.Create(ctx, res); err != nil {
		// Remove what we stored, unless a record for this name appeared
		// meanwhile (a sync imported the tarball, or another create won):
		// then the tarball is that record's, and stays.
		if !errors.Is(err, catalog.ErrAlreadyExists) {
			_ = bl.Delete(context.WithoutCancel(ctx), key)
		}
		return err
	}
	fmt.Fprintf(a.s.Out, "backup %s created: %d items, %s, stored at %s/%s\n", name, sum.Items, humanBytes(fi.Size()), bl.URL(), key)
	return nil
}

// backupView is the JSON and YAML shape of a backup.
type backupView struct {
	Name        string                    `json:"name"`
	UID         string                    `json:"uid"`
	Phase       catalog.Phase             `json:"phase"`
	Labels      map[string]string         `json:"labels,omitempty"`
	Annotations map[string]string         `json:"annotations,omitempty"`
	CreatedAt   time.Time                 `json:"createdAt"`
	Spec        backup.Spec               `json:"spec"`
	Status      backup.Status             `json:"status"`
	DueAt       *time.Time                `json:"deletionDueAt,omitempty"`
	DeletingAt  *time.Time                `json:"deletionTimestamp,omitempty"`
	Finalizers  []string                  `json:"finalizers,omitempty"`
	Conditions  []catalog.Condition       `json:"conditions,omitempty"`
	Progress    *catalog.DeletionProgress `json:"deletionProgress,omitempty"`
	Unsettled   []catalog.ItemOutcome     `json:"unsettled,omitempty"`
}

func (a *app) backupView(ctx context.Context, r *catalog.Resource, withRows bool) (*backupView, error) {
	b, err := backup.FromResource(r)
	if err != nil {
		return nil, err
	}
	v := &backupView{
		Name: r.Name, UID: r.UID, Phase: r.Phase, Labels: r.Labels, Annotations: r.Annotations,
		CreatedAt: r.CreatedAt, Spec: b.Spec, Status: b.Status, DueAt: r.DeletionDueAt,
		DeletingAt: r.DeletionTimestamp, Finalizers: r.Finalizers, Conditions: r.Conditions,
	}
	if r.Phase == catalog.PhaseDeleting {
		p, rows, err := a.store.LoadProgress(ctx, r.UID)
		if err == nil {
			v.Progress = p
			if withRows {
				v.Unsettled = rows
			}
		} else if !errors.Is(err, catalog.ErrNotFound) {
			return nil, err
		}
	}
	return v, nil
}

// phaseText is the PHASE column: the phase, the time left in the grace
// window, or the deletion's progress.
func (v *backupView) phaseText(now time.Time) string {
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
		Example: `  lethe backup list
  lethe backup list -l team=db -o json`,
		Args: exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.Flags().StringVarP(&selector, "selector", "l", "", "label selector, e.g. team=db,env!=dev")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		ctx := cmd.Context()
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		rs, err := listAll(ctx, st, catalog.ListOptions{Kind: backup.Kind, LabelSelector: selector})
		if err != nil {
			return err
		}
		var views []*backupView
		for _, r := range rs {
			v, err := a.backupView(ctx, r, false)
			if err != nil {
				return err
			}
			views = append(views, v)
		}
		if *out != "table" {
			if views == nil {
				views = []*backupView{}
			}
			return printStructured(a.s.Out, *out, views)
		}
		if len(views) == 0 {
			fmt.Fprintln(a.s.Out, "No backups. Register one with: lethe backup create NAME --from FILE.tar.gz")
			return nil
		}
		now := time.Now()
		t := newTable(a.s.Out, "NAME", "PHASE", "ITEMS", "SIZE", "AGE", "EXPIRES")
		for _, v := range views {
			exp := "never"
			if v.Spec.ExpiresAt != nil {
				exp = "in " + human(v.Spec.ExpiresAt.Sub(now))
				if v.Spec.ExpiresAt.Before(now) {
					exp = "expired " + human(now.Sub(*v.Spec.ExpiresAt)) + " ago"
				}
			}
			t.row(v.Name, v.phaseText(now), fmt.Sprint(v.Spec.Items), humanBytes(v.Spec.Size), human(now.Sub(v.CreatedAt)), exp)
		}
		return t.flush()
	}
	return c
}

func newBackupGetCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one backup: its phase, storage, and what its deletion did so far",
		Example: `  lethe backup get nightly-0412
  lethe backup get nightly-0412 -o yaml`,
		Args: exactArgs(1, "NAME"),
	}
	out := outputFlag(c, "table")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		ctx := cmd.Context()
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		r, err := st.Get(ctx, backup.Key(args[0]))
		if errors.Is(err, catalog.ErrNotFound) {
			if ts, terr := st.GetTombstone(ctx, backup.Key(args[0])); terr == nil {
				return fmt.Errorf("backup %q was purged at %s by %s", args[0], ts.PurgedAt.Local().Format(time.RFC3339), ts.Actor)
			}
			return fmt.Errorf("backup %q not found", args[0])
		}
		if err != nil {
			return err
		}
		v, err := a.backupView(ctx, r, true)
		if err != nil {
			return err
		}
		if *out != "table" {
			return printStructured(a.s.Out, *out, v)
		}
		a.printBackup(v)
		return nil
	}
	return c
}

func (a *app) printBackup(v *backupView) {
	w := a.s.Out
	now := time.Now()
	fmt.Fprintf(w, "Name:       %s\n", v.Name)
	fmt.Fprintf(w, "UID:        %s\n", v.UID)
	fmt.Fprintf(w, "Phase:      %s\n", v.phaseText(now))
	fmt.Fprintf(w, "Created:    %s (%s ago)\n", v.CreatedAt.Local().Format(time.RFC3339), human(now.Sub(v.CreatedAt)))
	fmt.Fprintf(w, "Tarball:    %s (%d items, %s, sha256 %s)\n", v.Spec.StorageKey, v.Spec.Items, humanBytes(v.Spec.Size), shortDigest(v.Spec.Digest))
	if v.Spec.ExpiresAt != nil {
		fmt.Fprintf(w, "Expires:    %s (TTL %s)\n", v.Spec.ExpiresAt.Local().Format(time.RFC3339), time.Duration(v.Spec.TTL))
	}
	if d, ok := v.Annotations[catalog.AnnotationDeletionDelay]; ok {
		fmt.Fprintf(w, "Grace:      %s\n", d)
	}
	if len(v.Labels) > 0 {
		fmt.Fprintf(w, "Labels:     %s\n", joinMap(v.Labels))
	}
	if v.DueAt != nil {
		fmt.Fprintf(w, "Deletion:   due %s; undo with: lethe backup undelete %s\n", v.DueAt.Local().Format(time.RFC3339), v.Name)
	}
	if v.DeletingAt != nil {
		fmt.Fprintf(w, "Deleting:   since %s; finalizers: %s\n", v.DeletingAt.Local().Format(time.RFC3339), cmp.Or(strings.Join(v.Finalizers, ", "), "none"))
	}
	if p := v.Progress; p != nil {
		fmt.Fprintf(w, "Progress:   %d of %d items settled\n", p.Watermark, p.TotalItems)
		t := newTable(w, "  PLUGIN", "DONE", "SKIPPED", "FAILED", "BLOCKED")
		for _, name := range slices.Sorted(maps.Keys(p.Counts)) {
			c := p.Counts[name]
			t.row("  "+name, fmt.Sprint(c.Done), fmt.Sprint(c.Skipped), fmt.Sprint(c.Failed), fmt.Sprint(c.Blocked))
		}
		_ = t.flush()
	}
	if len(v.Unsettled) > 0 {
		fmt.Fprintf(w, "Unsettled items (%d); run 'lethe backup delete %s' again to retry them:\n", len(v.Unsettled), v.Name)
		for i, o := range v.Unsettled {
			if i == 20 {
				fmt.Fprintf(w, "  ... and %d more (-o json lists all)\n", len(v.Unsettled)-20)
				break
			}
			fmt.Fprintf(w, "  %-7s %s  %s: %s (attempts %d)\n", o.Outcome, o.ItemKey, o.Plugin, o.Message, o.Attempts)
		}
	}
	for _, c := range v.Conditions {
		fmt.Fprintf(w, "Condition:  %s=%s %s %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
}

func joinMap(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
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

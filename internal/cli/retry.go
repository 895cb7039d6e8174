package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/gc"
	"github.com/lethehq/lethe/internal/pluginhost"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

// retryFlags configure the retry queue and its notifications.
type retryFlags struct {
	backoff     []string
	maxAttempts []string
	webhooks    []string
	secretFile  string

	// Parsed by resolve.
	policy retry.Policy
	// urls are the webhooks' URLs (the queue stores them without
	// credentials); notify the same with their secrets (the notifier).
	urls   []string
	notify []retry.Webhook
	// warnings are said once a logger exists (a deprecated setting).
	warnings []string
}

func (f *retryFlags) add(pf *pflag.FlagSet) {
	pf.StringArrayVar(&f.backoff, "retry-backoff", nil, "base delay of the retry backoff (Base·attempts⁴, capped at 24h, ±10% jitter), globally (`30s`) or for one plugin (`example.com/ebs=5m`); repeatable (env LETHE_RETRY_BACKOFF, comma-separated; default 30s)")
	pf.StringArrayVar(&f.maxAttempts, "retry-max-attempts", nil, "attempts before a waiting item is discarded to the dead letters (condition DeletionStuck), globally (`10`) or for one plugin (`example.com/ebs=20`); repeatable (env LETHE_RETRY_MAX_ATTEMPTS, comma-separated; default 10)")
	pf.StringArrayVar(&f.webhooks, "notify-webhook", nil, "POST a JSON notification, signed per Standard Webhooks with this target's own secret, to `URL,secret-file=FILE` when a deletion is stuck, abandoned or completed after being stuck (FILE: whsec_ and base64, mode 0600); repeatable (env LETHE_NOTIFY_WEBHOOKS, comma-separated)")
	pf.StringVar(&f.secretFile, "notify-secret-file", "", "deprecated: `FILE` holding the secret of a single --notify-webhook given without secret-file (or env LETHE_NOTIFY_SECRET)")
}

func (f *retryFlags) resolve(getenv func(string) string) error {
	list := func(v string) []string {
		var out []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	if len(f.backoff) == 0 {
		f.backoff = list(getenv("LETHE_RETRY_BACKOFF"))
	}
	if len(f.maxAttempts) == 0 {
		f.maxAttempts = list(getenv("LETHE_RETRY_MAX_ATTEMPTS"))
	}
	if len(f.webhooks) == 0 {
		f.webhooks = list(getenv("LETHE_NOTIFY_WEBHOOKS"))
	}
	p, err := retry.ParsePolicy(f.backoff, f.maxAttempts)
	if err != nil {
		return usageError{err}
	}
	f.policy = p
	return f.resolveWebhooks(getenv)
}

// secretFileOption ends a --notify-webhook URL with the target's secret
// file: URL,secret-file=FILE.
const secretFileOption = ",secret-file="

// joinSecretFiles undoes the comma split of LETHE_NOTIFY_WEBHOOKS where
// it cut a webhook from its secret-file option.
func joinSecretFiles(items []string) []string {
	var out []string
	for _, s := range items {
		if strings.HasPrefix(s, secretFileOption[1:]) && len(out) > 0 {
			out[len(out)-1] += "," + s
			continue
		}
		out = append(out, s)
	}
	return out
}

// resolveWebhooks reads each webhook's secret file. The old single
// secret (--notify-secret-file, LETHE_NOTIFY_SECRET) still serves one
// webhook given without its own, with a deprecation warning: one secret
// for several targets would let each receiver forge requests to the
// others, so it is refused there.
func (f *retryFlags) resolveWebhooks(getenv func(string) string) error {
	f.webhooks = joinSecretFiles(f.webhooks)
	var legacy []byte
	legacyFrom := ""
	switch {
	case f.secretFile != "":
		s, err := retry.ReadSecretFile(f.secretFile)
		if err != nil {
			return usageError{fmt.Errorf("--notify-secret-file: %w", err)}
		}
		legacy, legacyFrom = legacySecret(s), "--notify-secret-file"
	case getenv("LETHE_NOTIFY_SECRET") != "":
		legacy, legacyFrom = legacySecret(getenv("LETHE_NOTIFY_SECRET")), "LETHE_NOTIFY_SECRET"
	}
	f.urls, f.notify = nil, nil
	usedLegacy := false
	for _, spec := range f.webhooks {
		u, file := spec, ""
		if i := strings.LastIndex(spec, secretFileOption); i >= 0 {
			u, file = spec[:i], spec[i+len(secretFileOption):]
		}
		shown := retry.RedactWebhook(u)
		var key []byte
		switch {
		case file != "":
			s, err := retry.ReadSecretFile(file)
			if err != nil {
				return usageError{fmt.Errorf("--notify-webhook %q: secret-file: %w", shown, err)}
			}
			if key, err = retry.ParseSecret(s); err != nil {
				return usageError{fmt.Errorf("--notify-webhook %q: secret-file %s: %w", shown, file, err)}
			}
		case len(legacy) > 0 && len(f.webhooks) == 1:
			key, usedLegacy = legacy, true
		case len(legacy) > 0:
			return usageError{fmt.Errorf("--notify-webhook %q has no secret-file: %s serves a single webhook only (one secret for several would let each receiver forge notifications to the others); give each its own: URL,secret-file=FILE", shown, legacyFrom)}
		default:
			return usageError{fmt.Errorf("--notify-webhook %q needs a secret to sign its notifications: URL,secret-file=FILE (whsec_ and base64, mode 0600)", shown)}
		}
		f.urls = append(f.urls, u)
		f.notify = append(f.notify, retry.Webhook{URL: u, Secret: key})
	}
	if _, err := retry.WebhookIDs(f.urls); err != nil {
		return usageError{err}
	}
	switch {
	case usedLegacy:
		f.warnings = append(f.warnings, legacyFrom+" is deprecated: give the webhook its own secret with --notify-webhook URL,secret-file=FILE")
	case len(legacy) > 0:
		f.warnings = append(f.warnings, legacyFrom+" is ignored: every --notify-webhook has its own secret-file")
	}
	return nil
}

// legacySecret is the key of the old shared secret: a whsec_ secret is
// decoded; any other text is the key as it is (so the receiver keeps its
// secret, and only its check changes to the new headers).
func legacySecret(s string) []byte {
	s = strings.TrimSpace(s)
	if k, err := retry.ParseSecret(s); err == nil {
		return k
	}
	return []byte(s)
}

// checkPluginNames refuses a per-plugin retry setting for a plugin that
// is not installed (a typo would leave the real plugin on the defaults).
func (f *retryFlags) checkPluginNames(infos []pluginhost.Info) error {
	for name := range f.policy.Plugins {
		if !slices.ContainsFunc(infos, func(in pluginhost.Info) bool { return in.Name == name }) {
			return usageError{fmt.Errorf("--retry-backoff/--retry-max-attempts: no installed plugin is named %s", name)}
		}
	}
	return nil
}

// retryQueue opens the catalog and the retry queue.
func (a *app) retryQueue(ctx context.Context) (*retry.Queue, error) {
	if a.queue != nil {
		return a.queue, nil
	}
	st, err := a.catalog(ctx)
	if err != nil {
		return nil, err
	}
	// One writer of DeletionStuck per resource, never the queue: the
	// collector for catalog resources (the queue wakes its work item when
	// their rows change), the deletion pipeline for backups.
	wake := gc.WakeOnRetryChange(st, deletion.DefaultHolder(), time.Now)
	var q *retry.Queue
	q, err = retry.New(&retry.Config{Store: st, Policy: a.g.retry.policy, Webhooks: a.g.retry.urls, Logger: a.log,
		OwnerSync: map[string]func(context.Context, string) error{
			retry.KindResource:   wake,
			retry.KindWait:       wake,
			retry.KindBackupItem: deletion.SyncStuck(st, func() *retry.Queue { return q }, time.Now),
			retry.KindLocation:   deletion.SyncStuck(st, func() *retry.Queue { return q }, time.Now),
		}})
	if err != nil {
		return nil, usageError{err}
	}
	for _, w := range a.g.retry.warnings {
		a.log.Warn(w)
	}
	a.queue = q
	return q, nil
}

// retryNotFound: no retry row has the id (exit code 4).
type retryNotFound struct{ error }

func (a *app) retryRow(ctx context.Context, q *retry.Queue, arg string) (int64, error) {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id <= 0 {
		return 0, usageError{fmt.Errorf("retry row id %q: use the number 'lethe retry list' shows", arg)}
	}
	if _, err := q.Get(ctx, id); errors.Is(err, catalog.ErrNotFound) {
		return 0, retryNotFound{fmt.Errorf("retry row %d not found (finished, or never queued)", id)}
	} else if err != nil {
		return 0, err
	}
	return id, nil
}

func newRetryCmd(a *app) *cobra.Command {
	c := groupCmd(&cobra.Command{
		Use:   "retry",
		Short: "The retry queue: deletions that cannot finish yet, and the dead letters",
		Long: `Items whose deletion cannot finish yet wait in the retry queue: a backup item
that a plugin failed or blocked, a resource at a plugin, a resource waiting on
a block reference or a finalizer. 'lethe server' tries each again when it is
due: after a polynomial backoff with jitter (--retry-backoff), never before the
retryAfter its plugin asked for. After --retry-max-attempts the row is
discarded to the dead letters: its owner gets the condition DeletionStuck, an
event is recorded and the webhooks are notified. The deletion stays; nothing
is purged. An operator requeues it ('retry now') once the cause is fixed, or
abandons it ('lethe backup delete NAME --abandon').`,
		Example: `  lethe retry list
  lethe retry list --state discarded -o json
  lethe retry get 12
  lethe retry now 12 --dry-run
  lethe retry now --all --state discarded
  lethe retry discard 12`,
	})
	c.AddCommand(newRetryListCmd(a), newRetryGetCmd(a), newRetryNowCmd(a), newRetryDiscardCmd(a))
	return c
}

func parseState(s string) (catalog.RetryState, error) {
	if s == "" {
		return "", nil
	}
	st := catalog.RetryState(s)
	if !slices.Contains(catalog.RetryStates, st) {
		return "", usageError{fmt.Errorf("--state %q: use retryable, running or discarded", s)}
	}
	return st, nil
}

func newRetryListCmd(a *app) *cobra.Command {
	var state, kind string
	c := &cobra.Command{
		Use:   "list",
		Short: "List the queue: state, attempts, next attempt and last error of each row",
		Example: `  lethe retry list
  lethe retry list --state discarded
  lethe retry list --type BackupItem -o yaml`,
		Args: exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.Flags().StringVar(&state, "state", "", "only rows in this state: retryable, running or discarded")
	c.Flags().StringVar(&kind, "type", "", "only rows of this type: BackupItem, Resource, Wait or Location")
	// --kind was the flag's name when a row's type was its kind.
	c.Flags().StringVar(&kind, "kind", "", "only rows of this type (as --type)")
	_ = c.Flags().MarkHidden("kind")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		st, err := parseState(state)
		if err != nil {
			return err
		}
		if kind != "" && !slices.Contains([]string{retry.KindBackupItem, retry.KindResource, retry.KindWait, retry.KindLocation}, kind) {
			return usageError{fmt.Errorf("--type %q: use BackupItem, Resource, Wait or Location", kind)}
		}
		q, err := a.retryQueue(cmd.Context())
		if err != nil {
			return err
		}
		rows, err := q.List(cmd.Context(), catalog.RetryFilter{State: st, Kind: kind})
		if err != nil {
			return err
		}
		if structured(*out) {
			return printList(a.s.Out, *out, view.RetryItemKind, view.RetryItems(rows))
		}
		if len(rows) == 0 {
			fmt.Fprintln(a.s.Out, "The retry queue is empty.")
			return nil
		}
		now := time.Now()
		t := newTable(a.s.Out, "ID", "STATE", "TYPE", "OWNER", "ITEM", "PLUGIN", "ATTEMPTS", "NEXT ATTEMPT", "LAST ERROR")
		for _, r := range rows {
			t.row(strconv.FormatInt(r.ID, 10), termtext.Quote(string(r.State)), termtext.Quote(r.Kind), termtext.Quote(r.Key), termtext.Quote(cmp.Or(r.ItemID, "-")),
				termtext.Quote(cmp.Or(r.Plugin, "-")), strconv.Itoa(r.Attempts), termtext.Quote(nextText(r, now)), termtext.Quote(oneLine(r.LastError, 60)))
		}
		return t.flush()
	}
	return c
}

func nextText(r *catalog.RetryRow, now time.Time) string {
	switch {
	case r.State == catalog.RetryDiscarded:
		return "never (discarded)"
	case r.State == catalog.RetryRunning:
		return "running (" + r.Holder + ")"
	case !r.NextAttemptAt.After(now):
		return "due now"
	}
	return r.NextAttemptAt.Local().Format(time.RFC3339) + " (in " + human(r.NextAttemptAt.Sub(now)) + ")"
}

// oneLine cuts s to at most n bytes on one line, at a rune boundary.
func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		cut := n - 1
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return s[:cut] + "…"
	}
	return s
}

func newRetryGetCmd(a *app) *cobra.Command {
	var ns string
	c := &cobra.Command{
		Use:   "get ID | KIND NAME",
		Short: "Show one row of the retry queue, or every row of one owner, with its history",
		Example: `  lethe retry get 12
  lethe retry get backup nightly-0413
  lethe retry get VolumeSnapshot snap-w -n prod -o json`,
		Args: cobra.RangeArgs(1, 2),
	}
	out := outputFlag(c, "table")
	c.Flags().StringVarP(&ns, "namespace", "n", "", "with KIND NAME: the owner's namespace")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		ctx := cmd.Context()
		q, err := a.retryQueue(ctx)
		if err != nil {
			return err
		}
		ids, err := a.retryRows(ctx, q, args, ns)
		if err != nil {
			return err
		}
		var rows []*catalog.RetryRow
		for _, id := range ids {
			r, err := q.Get(ctx, id)
			if err != nil {
				return err
			}
			rows = append(rows, r)
		}
		if structured(*out) {
			if len(args) == 1 {
				return printObject(a.s.Out, *out, view.RetryItemKind, view.NewRetryItem(rows[0]))
			}
			return printList(a.s.Out, *out, view.RetryItemKind, view.RetryItems(rows))
		}
		for i, r := range rows {
			if i > 0 {
				fmt.Fprintln(a.s.Out)
			}
			a.printRetry(r)
		}
		return nil
	}
	return c
}

func (a *app) printRetry(r *catalog.RetryRow) {
	w, now := a.s.Out, time.Now()
	fmt.Fprintf(w, "ID:           %d\n", r.ID)
	fmt.Fprintf(w, "State:        %s\n", termtext.Quote(string(r.State)))
	fmt.Fprintf(w, "Kind:         %s\n", termtext.Quote(r.Kind))
	fmt.Fprintf(w, "Owner:        %s (uid %s)\n", termtext.Quote(r.Key), termtext.Quote(cmp.Or(r.OwnerUID, "-")))
	fmt.Fprintf(w, "Item:         %s\n", termtext.Quote(cmp.Or(r.ItemID, "-")))
	fmt.Fprintf(w, "Plugin:       %s\n", termtext.Quote(cmp.Or(r.Plugin, "-")))
	fmt.Fprintf(w, "Attempts:     %d\n", r.Attempts)
	fmt.Fprintf(w, "Next attempt: %s\n", termtext.Quote(nextText(r, now)))
	fmt.Fprintf(w, "First seen:   %s\n", r.FirstSeenAt.Local().Format(time.RFC3339))
	fmt.Fprintf(w, "Last error:   %s\n", termtext.Quote(cmp.Or(r.LastError, "-")))
	fmt.Fprintf(w, "Explain:      %s\n", termtext.Quote(retry.ExplainCommand(ownerOf(r.Key))))
	fmt.Fprintln(w, "History:")
	t := newTable(w, "  TIME", "OUTCOME", "DURATION", "MESSAGE")
	for _, h := range r.History {
		t.row("  "+h.Time.Local().Format(time.RFC3339), termtext.Quote(h.Outcome), h.Duration.Round(time.Millisecond).String(), termtext.Quote(oneLine(h.Message, 100)))
	}
	_ = t.flush()
	switch r.State {
	case catalog.RetryDiscarded:
		if r.Kind == retry.KindBackupItem {
			fmt.Fprintf(w, "Discarded: the deletion stays. Fix the cause, then 'lethe retry now %d'; or abandon the backup's deletion.\n", r.ID)
		} else {
			fmt.Fprintf(w, "Discarded: the deletion stays. Fix the cause, then 'lethe retry now %d'.\n", r.ID)
		}
	case catalog.RetryRetryable:
		fmt.Fprintf(w, "'lethe retry now %d' tries it at once ('lethe server' runs it).\n", r.ID)
	}
}

func ownerOf(key string) catalog.Key {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) == 3 {
		return catalog.Key{Kind: parts[0], Namespace: parts[1], Name: parts[2]}
	}
	if len(parts) == 2 {
		return catalog.Key{Kind: parts[0], Name: parts[1]}
	}
	return catalog.Key{Name: key}
}

// retryActionView is the -o json|yaml shape of `retry now` and `retry
// discard`: a RetryItemList with dryRun.
type retryActionView struct {
	DryRun bool          `json:"dryRun"`
	Items  []view.Object `json:"items"`
}

func newRetryNowCmd(a *app) *cobra.Command {
	var all, dryRun bool
	var state, ns string
	c := &cobra.Command{
		Use:   "now ID | KIND NAME | --all",
		Short: "Requeue rows at once (a discarded one starts its attempts again); audited",
		Long: `Make rows due now: 'lethe server' runs them at once (a backup item: the
backup's deletion; a resource or a wait: a step of the garbage collector on
that resource). A discarded row gets a fresh set of attempts, and its
owner's DeletionStuck condition is cleared when no discarded row is left
(for a resource, by the collector's next step on it). Each requeue is in
the audit log, in the name of whoever ran it.`,
		Example: `  lethe retry now 12
  lethe retry now 12 --dry-run
  lethe retry now backup nightly-0413         # every row of that backup
  lethe retry now --all --state discarded -o json`,
		Args: cobra.MaximumNArgs(2),
	}
	c.Flags().StringVarP(&ns, "namespace", "n", "", "with KIND NAME: the owner's namespace")
	out := outputFlag(c, "table")
	c.Flags().BoolVar(&all, "all", false, "requeue every row that is not running")
	c.Flags().StringVar(&state, "state", "", "with --all: only rows in this state (retryable or discarded)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "show what would be requeued; change nothing")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		return a.retryAction(cmd, args, ns, all, state, dryRun, *out, "requeued", func(ctx context.Context, q *retry.Queue, id int64) (*catalog.RetryRow, error) {
			return q.RetryNow(ctx, id, dryRun)
		})
	}
	return c
}

func newRetryDiscardCmd(a *app) *cobra.Command {
	var dryRun bool
	var ns string
	c := &cobra.Command{
		Use:   "discard ID | KIND NAME",
		Short: "Discard a row to the dead letters by hand; audited",
		Long: `Stop retrying a row: it is discarded as if its attempts were exhausted. Its
owner gets DeletionStuck, an event is recorded and the webhooks are notified.
The deletion stays, nothing is purged: to give a backup up, abandon it
('lethe backup delete NAME --abandon').

For a resource (kinds Resource and Wait) discarding never purges either:
the resource stays Deleting with its finalizers, its plugin is not run
again until 'lethe retry now', and the collector ('lethe server', or
'lethe delete --wait') marks it DeletionStuck=Discarded on its next pass.
A discarded Wait row still goes by itself when the wait ends (the referrer
is deleted, the finalizer removed).`,
		Example: `  lethe retry discard 12 --dry-run
  lethe retry discard 12
  lethe retry discard backup nightly-0413      # every row of that backup`,
		Args: cobra.RangeArgs(1, 2),
	}
	c.Flags().StringVarP(&ns, "namespace", "n", "", "with KIND NAME: the owner's namespace")
	out := outputFlag(c, "table")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "show what would be discarded; change nothing")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		return a.retryAction(cmd, args, ns, false, "", dryRun, *out, "discarded", func(ctx context.Context, q *retry.Queue, id int64) (*catalog.RetryRow, error) {
			return q.Discard(ctx, id, dryRun)
		})
	}
	return c
}

func (a *app) retryAction(cmd *cobra.Command, args []string, ns string, all bool, state string, dryRun bool, out, verb string,
	do func(context.Context, *retry.Queue, int64) (*catalog.RetryRow, error)) error {
	if err := checkOutput(out); err != nil {
		return err
	}
	if all == (len(args) > 0) {
		return usageError{fmt.Errorf("%s needs an ID, KIND NAME or --all (one of them)", cmd.CommandPath())}
	}
	st, err := parseState(state)
	if err != nil {
		return err
	}
	if state != "" && !all {
		return usageError{errors.New("--state goes with --all")}
	}
	if st == catalog.RetryRunning {
		return usageError{errors.New("--state running: a running row cannot be requeued")}
	}
	ctx := cmd.Context()
	q, err := a.retryQueue(ctx)
	if err != nil {
		return err
	}
	var ids []int64
	if all {
		rows, err := q.List(ctx, catalog.RetryFilter{State: st})
		if err != nil {
			return err
		}
		for _, r := range rows {
			if r.State != catalog.RetryRunning {
				ids = append(ids, r.ID)
			}
		}
	} else if ids, err = a.retryRows(ctx, q, args, ns); err != nil {
		return err
	}
	var rows []*catalog.RetryRow
	for _, id := range ids {
		r, err := do(ctx, q, id)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	if structured(out) {
		items, err := view.ToObjects(view.RetryItemKind, view.RetryItems(rows))
		if err != nil {
			return err
		}
		return printObject(a.s.Out, out, view.RetryItemKind+"List", retryActionView{DryRun: dryRun, Items: items})
	}
	prefix := ""
	if dryRun {
		prefix = "would be "
	}
	for _, r := range rows {
		what := r.Key
		if r.ItemID != "" {
			what += " " + r.ItemID
		}
		if r.Plugin != "" {
			what += " at " + r.Plugin
		}
		fmt.Fprintf(a.s.Out, "retry row %d (%s) %s%s\n", r.ID, termtext.Quote(what), prefix, verb)
	}
	if len(rows) == 0 {
		fmt.Fprintln(a.s.Out, "nothing to do: no row matches")
	}
	if dryRun {
		fmt.Fprintln(a.s.Out, "(dry run: nothing changed)")
	}
	return nil
}

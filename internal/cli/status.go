package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/status"
	"github.com/lethehq/lethe/internal/termtext"
)

// kindStatus is the kind of lethe status -o json|yaml.
const kindStatus = "Status"

// statusView is the Status object.
type statusView struct {
	Catalog string `json:"catalog"`
	*status.Summary
}

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

// statusMinGap is the shortest time between two frames: a burst of
// changes redraws once.
const statusMinGap = 500 * time.Millisecond

func newStatusCmd(a *app) *cobra.Command {
	var once bool
	var interval time.Duration
	c := &cobra.Command{
		Use:   "status",
		Short: "Summarize the catalog on one screen: phases, deletions in flight, queues, retries, leader",
		Long: `Status shows, on one screen: the resources of each kind by phase (Active,
Scheduled, Deleting); the backups being deleted, with their progress, rate
and what holds them up (unsettled items, conditions); the deletion and gc
work queues; the retry queue (retryable, running, discarded); and the lethe
server leader lease.

On a terminal it stays and redraws when the catalog changes (its change
feed) and every --interval for the rates, until Ctrl-C. Otherwise, with
--once, or with -o json|yaml (one Status object), it prints once.`,
		Example: `  lethe status
  lethe status --once
  lethe status -o json`,
		Args: exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.Flags().BoolVar(&once, "once", false, "print once, even on a terminal")
	c.Flags().DurationVar(&interval, "interval", 2*time.Second, "on a terminal, redraw at least this often (rates, leases)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		if interval < statusMinGap {
			return usageError{fmt.Errorf("--interval %s: use at least %s", interval, statusMinGap)}
		}
		live := a.s.InteractiveOut && !once && !structured(*out)
		a.fileWake = live
		ctx := cmd.Context()
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		if !live {
			s, err := status.Read(ctx, st, time.Now(), nil)
			if err != nil {
				return err
			}
			if structured(*out) {
				return printObject(a.s.Out, *out, kindStatus, statusView{Catalog: catalog.RedactURL(a.g.store), Summary: s})
			}
			return a.printStatus(a.s.Out, s)
		}
		return a.liveStatus(ctx, st, interval)
	}
	return c
}

// liveStatus redraws the summary on each change of the catalog and every
// interval, until ctx ends (Ctrl-C: exit 0).
func (a *app) liveStatus(ctx context.Context, st catalog.Store, interval time.Duration) error {
	a.aborts.quiet.Store(true)
	from, err := st.CurrentVersion(ctx)
	if err != nil {
		return stopped(ctx, err)
	}
	sub, err := st.Watch(ctx, catalog.WatchOptions{FromVersion: from})
	if err != nil {
		return stopped(ctx, err)
	}
	defer sub.Close()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var prev *status.Summary
	for {
		s, err := status.Read(ctx, st, time.Now(), prev)
		if err != nil {
			return stopped(ctx, err)
		}
		prev = s
		var frame bytes.Buffer
		frame.WriteString(clearScreen)
		if err := a.printStatus(&frame, s); err != nil {
			return err
		}
		if _, err := a.s.Out.Write(frame.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case _, ok := <-sub.Events():
			if !ok {
				return stopped(ctx, sub.Err())
			}
			select { // let a burst of changes settle into one frame
			case <-ctx.Done():
				return nil
			case <-time.After(statusMinGap):
			}
			drain(sub.Events())
		}
	}
}

// drain takes what is waiting on ch without blocking.
func drain(ch <-chan catalog.Event) {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// printStatus writes the summary as text.
func (a *app) printStatus(w io.Writer, s *status.Summary) error {
	fmt.Fprintf(w, "Catalog:  %s\n", termtext.Quote(catalog.RedactURL(a.g.store)))
	fmt.Fprintf(w, "Time:     %s\n", s.Time.Local().Format(time.RFC3339))
	switch l := s.Leader; {
	case l == nil:
		fmt.Fprintln(w, "Leader:   none (no lethe server has run on this catalog)")
	case l.Live:
		fmt.Fprintf(w, "Leader:   %s (term %d, lease for %s more)\n", termtext.Quote(l.Holder), l.Term, human(l.ExpiresAt.Sub(s.Time)))
	case l.Holder == "":
		fmt.Fprintf(w, "Leader:   none (term %d resigned)\n", l.Term)
	default:
		fmt.Fprintf(w, "Leader:   none (%s's lease, term %d, expired %s ago)\n", termtext.Quote(l.Holder), l.Term, human(s.Time.Sub(l.ExpiresAt)))
	}
	fmt.Fprintln(w)
	if len(s.Resources) == 0 {
		fmt.Fprintln(w, "Resources: none")
	} else {
		t := newTable(w, "KIND", "ACTIVE", "SCHEDULED", "DELETING")
		for _, k := range slices.Sorted(maps.Keys(s.Resources)) {
			c := s.Resources[k]
			t.row(termtext.Quote(k), fmt.Sprint(c.Active), fmt.Sprint(c.Scheduled), fmt.Sprint(c.Deleting))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	if len(s.Deletions) == 0 {
		fmt.Fprintln(w, "Backup deletions in flight: none")
	} else {
		fmt.Fprintf(w, "Backup deletions in flight: %d\n", len(s.Deletions))
		const shown = 10
		t := newTable(w, "  NAME", "PROGRESS", "RATE", "UNSETTLED", "FOR", "HELD UP BY")
		for _, d := range s.Deletions[:min(len(s.Deletions), shown)] {
			progress := fmt.Sprintf("%d/%d", d.Watermark, d.TotalItems)
			if d.TotalItems > 0 {
				progress += fmt.Sprintf(" (%d%%)", d.Watermark*100/d.TotalItems)
			}
			since := "-"
			if d.StartedAt != nil {
				since = human(s.Time.Sub(*d.StartedAt))
			}
			t.row("  "+termtext.Quote(d.Name), progress, fmt.Sprintf("%.0f items/s", d.ItemsPerSecond), fmt.Sprint(d.Unsettled), since,
				dash(strings.Join(quoteAll(d.Conditions), ",")))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if len(s.Deletions) > shown {
			fmt.Fprintf(w, "  ... and %d more (lethe backup list)\n", len(s.Deletions)-shown)
		}
	}
	fmt.Fprintln(w)
	if len(s.Locations) == 0 {
		fmt.Fprintln(w, "Storage locations: none checked yet (lethe server checks them; so does lethe backup sync)")
	} else {
		fmt.Fprintln(w, "Storage locations:")
		t := newTable(w, "  NAME", "PHASE", "CHECKED", "SYNCED", "ERROR")
		for _, l := range s.Locations {
			t.row("  "+termtext.Quote(l.Name), dash(l.Phase), ago(s.Time, l.LastCheckTime), ago(s.Time, l.LastSyncTime), dash(termtext.Quote(l.LastError)))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Work queues:")
	for _, q := range slices.Sorted(maps.Keys(s.Queues)) {
		c := s.Queues[q]
		fmt.Fprintf(w, "  %-9s %d due, %d running, %d waiting\n", q, c.Due, c.Leased, c.Waiting)
	}
	fmt.Fprintf(w, "Retry queue: %d retryable, %d running, %d discarded (lethe retry list)\n", s.Retry.Retryable, s.Retry.Running, s.Retry.Discarded)
	return nil
}

// ago says how long before now t was, or "never".
func ago(now time.Time, t *time.Time) string {
	if t == nil {
		return "never"
	}
	return human(now.Sub(*t)) + " ago"
}

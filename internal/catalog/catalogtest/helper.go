package catalogtest

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

// Cross-process tests re-execute the test binary as a helper process (as
// hashicorp/go-plugin's tests do). The helper reads its orders from the
// environment and talks to the test over stdin and stdout.
const (
	envHelper = "LETHE_CATALOGTEST_HELPER"
	envURL    = "LETHE_CATALOGTEST_URL"
	envSchema = "LETHE_CATALOGTEST_SCHEMA"
	envHolder = "LETHE_CATALOGTEST_HOLDER"
	envCount  = "LETHE_CATALOGTEST_COUNT"
)

// Target says how another process opens the same catalog.
type Target struct {
	URL    string // as drivers.Open takes it
	Schema string // PostgreSQL schema, "" for SQLite
	// PollInterval for this process's stores (default 20ms). PostgreSQL
	// tests set it to hours, so only NOTIFY can wake a subscriber.
	PollInterval time.Duration
}

func (tg Target) open(ctx context.Context, now func() time.Time) (catalog.Store, error) {
	return drivers.Open(ctx, tg.URL, &catalog.Config{Schema: tg.Schema, Now: now,
		PollInterval: cmp.Or(tg.PollInterval, 20*time.Millisecond)})
}

// HelperMain must be called first thing in the TestMain of a driver's test
// package. It returns at once unless the binary was re-executed as a
// helper process, in which case it runs the helper and exits.
func HelperMain() {
	mode := os.Getenv(envHelper)
	if mode == "" {
		return
	}
	if err := runHelper(mode); err != nil {
		fmt.Fprintln(os.Stderr, "catalogtest helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

const claimQueue = "xproc"

func runHelper(mode string) error {
	ctx := context.Background()
	s, err := Target{URL: os.Getenv(envURL), Schema: os.Getenv(envSchema)}.open(ctx, time.Now)
	if err != nil {
		return err
	}
	defer s.Close()
	in := bufio.NewScanner(os.Stdin)
	switch mode {
	case "claim":
		return helperClaim(ctx, s, in, os.Getenv(envHolder))
	case "write":
		n, err := strconv.Atoi(os.Getenv(envCount))
		if err != nil {
			return err
		}
		return writeScript(n, func(op scriptOp) error { return op.do(ctx, s) })
	}
	return fmt.Errorf("unknown helper mode %q", mode)
}

// helperClaim waits for "go", claims items one at a time until none is
// left, reporting each, then obeys "renew" until stdin closes.
func helperClaim(ctx context.Context, s catalog.Store, in *bufio.Scanner, holder string) error {
	if !in.Scan() || in.Text() != "go" {
		return errors.New("expected go")
	}
	var mine []*catalog.WorkItem
	for {
		got, err := s.Claim(ctx, claimQueue, holder, time.Minute, 1)
		if err != nil {
			return err
		}
		if len(got) == 0 {
			break
		}
		for _, w := range got {
			cur, err := s.GetWork(ctx, claimQueue, w.Key)
			if err != nil {
				return err
			}
			if cur.Holder != holder {
				return fmt.Errorf("claimed %s but the holder is %s", w.Key, cur.Holder)
			}
			mine = append(mine, w)
			fmt.Printf("claimed %s\n", w.Key)
		}
	}
	fmt.Println("done")
	for in.Scan() {
		if in.Text() == "renew" {
			for _, w := range mine {
				if _, err := s.Renew(ctx, w.Fence(), time.Hour); err != nil {
					return err
				}
			}
			fmt.Println("renewed")
		}
	}
	return in.Err()
}

type helperProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startHelper(t *testing.T, tg Target, mode string, env ...string) *helperProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"="+mode, envURL+"="+tg.URL, envSchema+"="+tg.Schema)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &helperProc{cmd: cmd, stdin: stdin, lines: make(chan string, 1024)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		for range p.lines {
		}
		_ = p.cmd.Wait()
	})
	return p
}

// until reads lines up to and including stop, returning the ones before.
func (p *helperProc) until(t *testing.T, stop string) []string {
	t.Helper()
	guard := time.NewTimer(60 * time.Second) // hang guard only
	defer guard.Stop()
	var out []string
	for {
		select {
		case l, ok := <-p.lines:
			require.True(t, ok, "helper exited before %q", stop)
			if l == stop {
				return out
			}
			out = append(out, l)
		case <-guard.C:
			require.FailNow(t, "helper stalled", "waiting for %q", stop)
		}
	}
}

func (p *helperProc) send(t *testing.T, line string) {
	t.Helper()
	_, err := io.WriteString(p.stdin, line+"\n")
	require.NoError(t, err)
}

// RunCrossProcessClaims races two helper processes for the same work
// items: each item is claimed by exactly one of them. Then one is killed
// with SIGKILL: its leases stay held until they expire, and are then taken
// over, while the survivor's (renewed) leases are not. tg must already be
// migrated (open a store on it first).
func RunCrossProcessClaims(t *testing.T, tg Target) {
	ctx := context.Background()
	s, err := tg.open(ctx, time.Now)
	require.NoError(t, err)
	defer s.Close()
	const n = 150
	for i := range n {
		k := fmt.Sprintf("item-%03d", i)
		_, err := s.Enqueue(ctx, catalog.WorkItem{Queue: claimQueue, Key: k})
		require.NoError(t, err)
	}
	holders := []string{"proc-a", "proc-b"}
	procs := make([]*helperProc, 2)
	for i, h := range holders {
		procs[i] = startHelper(t, tg, "claim", envHolder+"="+h)
	}
	// Sample the table while the helpers race: once an item has a holder,
	// it never shows another one (the leases outlive the race).
	stop := make(chan struct{})
	sampled := make(chan error, 1)
	go func() {
		first := map[string]string{}
		rounds := 0
		for {
			items, err := s.ListWork(ctx, claimQueue)
			if err != nil {
				sampled <- err
				return
			}
			rounds++
			for _, w := range items {
				if w.Holder == "" {
					continue
				}
				if prev, ok := first[w.Key]; ok && prev != w.Holder {
					sampled <- fmt.Errorf("%s held by %s, then by %s", w.Key, prev, w.Holder)
					return
				}
				first[w.Key] = w.Holder
			}
			select {
			case <-stop:
				t.Logf("sampled the holders %d times during the race", rounds)
				sampled <- nil
				return
			default:
			}
		}
	}()
	for _, p := range procs {
		p.send(t, "go")
	}
	claimed := make([][]string, 2)
	owner := map[string]string{}
	for i, p := range procs {
		for _, l := range p.until(t, "done") {
			k, ok := strings.CutPrefix(l, "claimed ")
			require.True(t, ok, l)
			if prev, dup := owner[k]; dup {
				t.Fatalf("%s claimed by both %s and %s", k, prev, holders[i])
			}
			owner[k] = holders[i]
			claimed[i] = append(claimed[i], k)
		}
	}
	close(stop)
	require.NoError(t, <-sampled)
	t.Logf("claims: %s %d, %s %d", holders[0], len(claimed[0]), holders[1], len(claimed[1]))
	require.Len(t, owner, n, "every item claimed")
	items, err := s.ListWork(ctx, claimQueue)
	require.NoError(t, err)
	for _, w := range items {
		assert.Equal(t, owner[w.Key], w.Holder, w.Key)
	}

	// Kill the process holding more items (so the takeover is not empty).
	victim, survivor := 0, 1
	if len(claimed[1]) > len(claimed[0]) {
		victim, survivor = 1, 0
	}
	require.NoError(t, procs[victim].cmd.Process.Kill()) // SIGKILL
	_ = procs[victim].cmd.Wait()
	procs[survivor].send(t, "renew")
	procs[survivor].until(t, "renewed")

	// Until the leases expire, nobody can take them.
	_, err = s.ClaimKey(ctx, claimQueue, claimed[victim][0], "parent", time.Minute)
	var held *catalog.LeaseHeldError
	require.ErrorAs(t, err, &held)
	assert.Equal(t, holders[victim], held.Holder)
	none, err := s.Claim(ctx, claimQueue, "parent", time.Minute, n)
	require.NoError(t, err)
	assert.Empty(t, none)

	// After expiry (a store whose clock is 5 minutes ahead), exactly the
	// dead process's items are taken over.
	later, err := tg.open(ctx, func() time.Time { return time.Now().Add(5 * time.Minute) })
	require.NoError(t, err)
	defer later.Close()
	taken, err := later.Claim(ctx, claimQueue, "taker", time.Minute, n)
	require.NoError(t, err)
	var keys []string
	for _, w := range taken {
		keys = append(keys, w.Key)
		assert.Equal(t, 2, w.Attempts)
	}
	slices.Sort(keys)
	want := slices.Clone(claimed[victim])
	slices.Sort(want)
	assert.Equal(t, want, keys)
	if len(claimed[survivor]) > 0 {
		_, err = later.ClaimKey(ctx, claimQueue, claimed[survivor][0], "taker", time.Minute)
		require.ErrorAs(t, err, &held)
		assert.Equal(t, holders[survivor], held.Holder)
	}
	require.NoError(t, procs[survivor].stdin.Close())
	require.NoError(t, procs[survivor].cmd.Wait(), "the survivor exits cleanly")
}

// scriptOp is one write of the writer script.
type scriptOp struct {
	what string // create, update, schedule, undelete, delete, purge
	name string
}

func (op scriptOp) key() catalog.Key {
	return catalog.Key{Kind: "XProc", Namespace: "ns", Name: op.name}
}

func (op scriptOp) event() catalog.EventType {
	switch op.what {
	case "create":
		return catalog.EventAdded
	case "purge":
		return catalog.EventDeleted
	}
	return catalog.EventUpdated
}

func (op scriptOp) do(ctx context.Context, s catalog.Store) error {
	k := op.key()
	var err error
	switch op.what {
	case "create":
		_, err = s.Create(ctx, &catalog.Resource{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name})
	case "update":
		var r *catalog.Resource
		if r, err = s.Get(ctx, k); err == nil {
			r.Labels = map[string]string{"touched": "yes"}
			_, err = s.Update(ctx, r)
		}
	case "schedule":
		_, err = s.Schedule(catalog.WithActor(ctx, "helper"), k, catalog.ScheduleOptions{Delay: time.Hour})
	case "undelete":
		_, err = s.Undelete(catalog.WithActor(ctx, "helper"), k, "")
	case "delete":
		_, err = s.Delete(catalog.WithActor(ctx, "helper"), k, catalog.DeleteOptions{})
	case "purge":
		err = s.Purge(catalog.WithActor(ctx, "helper"), k, catalog.PurgeOptions{})
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", op.what, op.name, err)
	}
	return nil
}

// writeScript calls do for a deterministic sequence of writes.
func writeScript(n int, do func(scriptOp) error) error {
	for i := range n {
		name := fmt.Sprintf("r%03d", i)
		ops := []string{"create", "update"}
		if i%3 == 0 {
			ops = append(ops, "schedule", "undelete")
		}
		if i%4 == 0 {
			ops = append(ops, "delete", "purge")
		}
		for _, o := range ops {
			if err := do(scriptOp{what: o, name: name}); err != nil {
				return err
			}
		}
	}
	return nil
}

// RunCrossProcessWatch has a helper process write while this process
// watches: the subscriber sees every event, in order, with consecutive
// versions. tg must already be migrated.
func RunCrossProcessWatch(t *testing.T, tg Target) {
	ctx := context.Background()
	s, err := tg.open(ctx, time.Now)
	require.NoError(t, err)
	defer s.Close()
	v0, err := s.CurrentVersion(ctx)
	require.NoError(t, err)
	sub, err := s.Watch(ctx, catalog.WatchOptions{FromVersion: v0})
	require.NoError(t, err)
	defer sub.Close()

	const n = 60
	var want []scriptOp
	require.NoError(t, writeScript(n, func(op scriptOp) error { want = append(want, op); return nil }))
	p := startHelper(t, tg, "write", envCount+"="+strconv.Itoa(n))
	evs := collect(t, sub, len(want))
	require.NoError(t, p.cmd.Wait(), "the writer exits cleanly")
	for i, ev := range evs {
		require.Equal(t, v0+int64(i)+1, ev.Version, "event %d", i)
		require.Equal(t, want[i].event(), ev.Type, "event %d (%s %s)", i, want[i].what, want[i].name)
		require.Equal(t, want[i].name, ev.Resource.Name, "event %d", i)
	}
	select {
	case ev, ok := <-sub.Events():
		if ok {
			t.Fatalf("unexpected extra event %+v", ev)
		}
	default:
	}
}

package plugintest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lethehq/lethe/pkg/plugin"
)

// helperEnv makes the test binary serve plugins instead of running tests,
// the way go-plugin's own tests get real plugin processes cheaply.
const helperEnv = "PLUGINTEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		goleak.VerifyTestMain(m)
	case "good":
		plugin.Serve(
			&plugin.Plugin{Name: "example.com/first", Version: "v0.1.0", Action: &fakeAction{}},
			&plugin.Plugin{Name: "example.com/second", Version: "v0.2.0", MaxConcurrency: 2, Action: &fakeAction{
				Selector: plugin.ResourceSelector{
					IncludedNamespaces: []string{"prod"},
					IncludedResources:  []string{"*.snapshot.storage.k8s.io"},
					LabelSelector:      "app=db,tier in (a,b),!legacy",
				},
				ExecuteFunc: waitForCancel,
			}},
		)
		os.Exit(0)
	case "leaves-child":
		// A process in the plugin's process group that outlives it: it
		// left the plugin's tree (its parent shell exited) before Serve
		// made the plugin a subreaper, so the SDK cannot find it.
		if err := exec.Command("sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 &").Run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		plugin.Serve(&plugin.Plugin{Name: "example.com/leaky", Action: &fakeAction{}})
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "unknown %s\n", helperEnv)
		os.Exit(2)
	}
}

// waitForCancel executes an item named "slow" until its ctx is cancelled,
// and every other item at once.
func waitForCancel(ctx context.Context, in *plugin.DeleteItemActionInput) error {
	if in.Item.Name != "slow" {
		return nil
	}
	<-ctx.Done()
	return context.Cause(ctx)
}

// fakeAction is a hand-written fake: a selector and an ExecuteFunc.
type fakeAction struct {
	Selector     plugin.ResourceSelector
	AppliesToErr error
	ExecuteFunc  func(context.Context, *plugin.DeleteItemActionInput) error
}

var _ plugin.DeleteItemAction = (*fakeAction)(nil)

func (a *fakeAction) AppliesTo(context.Context) (plugin.ResourceSelector, error) {
	return a.Selector, a.AppliesToErr
}

func (a *fakeAction) Execute(ctx context.Context, in *plugin.DeleteItemActionInput) error {
	if a.ExecuteFunc == nil {
		return nil
	}
	return a.ExecuteFunc(ctx, in)
}

// byName returns outcomes chosen by the item's name.
func byName(_ context.Context, in *plugin.DeleteItemActionInput) error {
	switch in.Item.Name {
	case "blocked":
		return fmt.Errorf("wrapped: %w", plugin.Blocked(time.Minute, "locked"))
	case "skipped":
		return plugin.Skipped("not mine")
	case "failed":
		return errors.New("boom\nsecond line")
	case "panics":
		panic("oh no")
	}
	return nil
}

// fakeTB records a fatal failure instead of failing the real test, to show
// that helpers fail tests when they should. Use it in its own goroutine.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	panic(fatalPanic{})
}

func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

type fatalPanic struct{}

// fatalMessage runs fn with a fakeTB and returns the fatal message, or ""
// when fn did not fail.
func fatalMessage(t *testing.T, fn func(tb testing.TB)) (msg string) {
	f := &fakeTB{TB: t}
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(fatalPanic); !ok {
				panic(v)
			}
		}
		msg = f.failed
	}()
	fn(f)
	return ""
}

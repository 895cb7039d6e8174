package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// chromium is the browser's path ("" when none was found); missing says
// why.
var chromium, missing string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	chromium, missing = findChromium()
	dir, err := buildLethe()
	if dir != "" {
		defer os.RemoveAll(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "browser tests:", err)
		return 1
	}
	bin = dir
	return m.Run()
}

// findChromium finds a Chromium: $LETHE_CHROMIUM, else Debian's
// chromium on PATH.
func findChromium() (path, why string) {
	if p := os.Getenv("LETHE_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", "LETHE_CHROMIUM: " + err.Error()
		}
		return p, ""
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, ""
		}
	}
	return "", "no chromium on PATH (Debian: apt-get install chromium; .ci/chromium.sh installs it)"
}

// required: CI and LETHE_BROWSER_REQUIRE=1 need the browser tests to run.
func required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("LETHE_BROWSER_REQUIRE") == "1"
}

// needChromium fails the test when the browser is missing and required,
// and skips it otherwise.
func needChromium(t *testing.T) {
	t.Helper()
	if chromium != "" {
		return
	}
	if required() {
		t.Fatalf("the browser tests must run here (CI=true or LETHE_BROWSER_REQUIRE=1), but: %s", missing)
	}
	t.Skipf("skipped: %s; set LETHE_BROWSER_REQUIRE=1 to make this a failure", missing)
}

// startBrowser starts a headless Chromium for the test and returns a
// context that has run once (so a tab may be opened from it).
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	needChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		// The tests run as root in CI, where Chromium's sandbox cannot start.
		chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	require.NoError(t, chromedp.Do(ctx), "starting %s", chromium)
	return ctx
}

// tab is a browser tab in a browser context of its own (its own
// cookies), which keeps what the page writes to the console.
type tab struct {
	t   *testing.T
	ctx context.Context
	mu  sync.Mutex
	log []string
}

// newTab opens a tab with cookies of its own.
func newTab(t *testing.T, browser context.Context) *tab {
	t.Helper()
	tb := &tab{t: t}
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext(), chromedp.WithListener(tb.listen))
	t.Cleanup(cancel)
	tb.ctx = ctx
	require.NoError(t, chromedp.Do(ctx))
	return tb
}

// listen keeps the console's errors and warnings: console.error and
// console.warn calls, uncaught exceptions, and the browser's own log
// entries (a resource that failed to load, a CSP violation).
func (tb *tab) listen(ev any) {
	var line string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError && ev.Type != runtime.ConsoleAPICalledTypeWarning && ev.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		var args []string
		for _, a := range ev.Args {
			if len(a.Value) > 0 {
				args = append(args, string(a.Value))
			} else {
				args = append(args, a.Description)
			}
		}
		line = "console." + string(ev.Type) + ": " + strings.Join(args, " ")
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		line = "exception: " + d.Text
		if d.Exception != nil {
			line += " " + d.Exception.Description
		}
	case *log.EventEntryAdded:
		if ev.Entry.Level != log.EntryLevelError && ev.Entry.Level != log.EntryLevelWarning {
			return
		}
		line = "log." + string(ev.Entry.Level) + " (" + string(ev.Entry.Source) + "): " + ev.Entry.Text + " " + ev.Entry.URL
	default:
		return
	}
	tb.mu.Lock()
	tb.log = append(tb.log, line)
	tb.mu.Unlock()
}

// take returns what the console got since the last take, and forgets it.
func (tb *tab) take() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	out := tb.log
	tb.log = nil
	return out
}

// quiet requires that the console got nothing since the last take; a
// message can arrive just after the load event, so it waits a little.
func (tb *tab) quiet(what string) {
	tb.t.Helper()
	time.Sleep(200 * time.Millisecond)
	require.Empty(tb.t, tb.take(), "%s: the console got errors", what)
}

// timeout bounds one browser action.
const timeout = 30 * time.Second

// open navigates to u and returns the document's response (after
// redirects).
func (tb *tab) open(u string) *network.Response {
	tb.t.Helper()
	return tb.response(chromedp.Navigate(u))
}

// response runs actions that load a page and returns its response.
func (tb *tab) response(actions ...chromedp.Action[chromedp.Void]) *network.Response {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, timeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, actions...)
	require.NoError(tb.t, err)
	require.NotNil(tb.t, resp)
	return resp
}

// eval evaluates a JavaScript expression (a promise is awaited) and
// returns its value as T.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	require.NoError(tb.t, err, "%s", expr)
	return v
}

// text is the text of the first element sel matches ("" when none).
func (tb *tab) text(sel string) string {
	tb.t.Helper()
	return eval[string](tb, fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.textContent.trim() : "" })()`, sel))
}

// screenshot writes a PNG of the whole page to $LETHE_CONSOLE_SCREENSHOTS/
// name.png when that folder is set (docs' pictures of the console).
func (tb *tab) screenshot(name string) {
	tb.t.Helper()
	dir := os.Getenv("LETHE_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(tb.ctx, timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(tb.t, err)
	require.NoError(tb.t, os.MkdirAll(dir, 0o750))
	require.NoError(tb.t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o600))
}

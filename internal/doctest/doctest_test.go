package doctest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// root is the checkout; built holds lethe and the example plugins, laid
// out as `make build` lays out bin/.
var root, built string

// serverSeconds: how long a foreground `lethe server` of a doc runs
// before its Ctrl-C.
const serverSeconds = "10"

// fileTimeout bounds the commands of one doc file.
const fileTimeout = 6 * time.Minute

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var err error
	if root, err = filepath.Abs(filepath.Join("..", "..")); err != nil {
		fmt.Fprintln(os.Stderr, "doctest:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "lethe-doctest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "doctest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	built = dir
	plugins, err := filepath.Glob(filepath.Join(root, "plugins", "*"))
	if err != nil || len(plugins) == 0 {
		fmt.Fprintln(os.Stderr, "doctest: no example plugins under plugins/")
		return 1
	}
	args := []string{"build", "-o", filepath.Join(dir, "plugins") + string(filepath.Separator)}
	for _, p := range plugins {
		args = append(args, "./plugins/"+filepath.Base(p))
	}
	for _, c := range [][]string{{"build", "-o", filepath.Join(dir, "lethe"), "./cmd/lethe"}, args} {
		cmd := exec.Command("go", c...)
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "doctest: building lethe and the plugins:", err)
			return 1
		}
	}
	return m.Run()
}

// docFiles are the files whose commands run, in order.
func docFiles(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	return append([]string{filepath.Join(root, "README.md")}, files...)
}

// tools are what the docs' commands use besides lethe and go.
var tools = []string{"bash", "make", "timeout", "curl", "python3", "zcat", "tar", "sed", "install"}

func TestDocs(t *testing.T) {
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the docs' commands need %s on the PATH: %v", tool, err)
		}
	}
	// The docs' commands run in a copy: the checkout is as it was after
	// them (git status the same), or a command wrote into it.
	before := checkoutStatus(t)
	t.Cleanup(func() {
		if after := checkoutStatus(t); after != before {
			t.Errorf("the docs' commands changed the checkout (git status before:\n%s\nafter:\n%s)", before, after)
		}
	})
	var skipped []string
	for _, path := range docFiles(t) {
		rel, err := filepath.Rel(root, path)
		require.NoError(t, err)
		text, err := os.ReadFile(path)
		require.NoError(t, err)
		blocks, err := parse(rel, string(text))
		require.NoError(t, err)
		var run []block
		for i, b := range blocks {
			if b.holdsCommands() {
				t.Errorf("%s:%d: an untagged block shows commands: tag it sh or console, or mark it <!-- doctest: skip REASON -->", b.file, b.line)
			}
			if b.output && (i == 0 || !blocks[i-1].runnable()) {
				t.Errorf("%s:%d: <!-- doctest: output --> follows no block that runs", b.file, b.line)
			}
			if b.skip != "" {
				skipped = append(skipped, fmt.Sprintf("%s:%d: %s", b.file, b.line, b.skip))
			}
			if b.runnable() || b.output || b.writeTo != "" {
				run = append(run, b)
			}
		}
		if len(run) == 0 {
			continue
		}
		t.Run(rel, func(t *testing.T) {
			t.Parallel()
			runFile(t, run)
		})
	}
	t.Cleanup(func() {
		t.Logf("%d blocks not run, each marked with its reason:\n  %s", len(skipped), strings.Join(skipped, "\n  "))
	})
}

// script turns a file's blocks into one bash script, and the commands
// whose exit code and output are checked.
func script(blocks []block) (string, []*command, map[int]string, error) {
	var sb strings.Builder
	var cmds []*command
	where := map[int]string{} // script line -> doc line
	line := 0
	emit := func(doc string, s string) {
		for _, l := range strings.Split(s, "\n") {
			line++
			where[line] = doc
			sb.WriteString(l + "\n")
		}
	}
	emit("", prelude)
	add := func(b block, at int, text string, want int, expect []string) *command {
		c := &command{id: len(cmds) + 1, file: b.file, line: at, text: text, want: want, server: isServer(text), expect: expect}
		cmds = append(cmds, c)
		server := "0"
		if c.server {
			server = "1"
		}
		emit(fmt.Sprintf("%s:%d", b.file, at), fmt.Sprintf("__dt %d %d %s %s", c.id, c.want, server, shellQuote(text)))
		return c
	}
	for _, b := range blocks {
		if b.writeTo != "" {
			emit(fmt.Sprintf("%s:%d", b.file, b.line), "mkdir -p \"$(dirname "+shellQuote(b.writeTo)+")\" && cat > "+shellQuote(b.writeTo)+" <<'__DT_EOF'\n"+strings.Join(b.lines, "\n")+"\n__DT_EOF")
			continue
		}
		if b.output {
			if len(cmds) == 0 || cmds[len(cmds)-1].file != b.file {
				return "", nil, nil, fmt.Errorf("%s:%d: <!-- doctest: output --> follows no command", b.file, b.line)
			}
			last := cmds[len(cmds)-1]
			if last.expect != nil {
				return "", nil, nil, fmt.Errorf("%s:%d: the output of %s is shown twice", b.file, b.line, last)
			}
			last.expect = b.lines
			continue
		}
		emit(fmt.Sprintf("%s:%d", b.file, b.line), fmt.Sprintf("__dt_block %s", shellQuote(fmt.Sprintf("%s:%d", b.file, b.line))))
		switch b.lang {
		case "sh":
			for i := 0; i < len(b.lines); {
				at := b.line + 1 + i
				t := strings.TrimSpace(b.lines[i])
				if commandRe.MatchString(t) && !strings.HasSuffix(strings.TrimSpace(stripComment(t)), "&") && !strings.Contains(stripComment(t), "& ") {
					text, next := takeCommand(b.lines, i)
					add(b, at, strings.TrimSpace(text), wantCode(text), nil)
					i = next
					continue
				}
				emit(fmt.Sprintf("%s:%d", b.file, at), b.lines[i])
				i++
			}
		case "console":
			var last *command
			for i := 0; i < len(b.lines); {
				at := b.line + 1 + i
				t := strings.TrimSpace(b.lines[i])
				if !strings.HasPrefix(t, "$ ") {
					if last == nil {
						return "", nil, nil, fmt.Errorf("%s:%d: a console block starts with a `$ ` command", b.file, at)
					}
					last.expect = append(last.expect, b.lines[i])
					i++
					continue
				}
				lines := append([]string{strings.TrimPrefix(t, "$ ")}, b.lines[i+1:]...)
				text, next := takeCommand(lines, 0)
				i += next
				if strings.TrimSpace(text) == "echo $?" {
					if last == nil || i >= len(b.lines) {
						return "", nil, nil, fmt.Errorf("%s:%d: echo $? needs a command before it and the code after it", b.file, at)
					}
					code, err := strconv.Atoi(strings.TrimSpace(b.lines[i]))
					if err != nil {
						return "", nil, nil, fmt.Errorf("%s:%d: echo $? is not followed by a number", b.file, at)
					}
					last.want = code
					// The script was written with the code the comment
					// named; the wrapper reads the final one below.
					i++
					continue
				}
				last = &command{id: len(cmds) + 1, file: b.file, line: at, text: text, want: wantCode(text), server: isServer(text)}
				cmds = append(cmds, last)
				emit(fmt.Sprintf("%s:%d", b.file, at), fmt.Sprintf("__dt %d @want%d@ %s %s", last.id, last.id, boolDigit(last.server), shellQuote(text)))
			}
		}
		emit(fmt.Sprintf("%s:%d", b.file, b.line), "__dt_end")
	}
	s := sb.String()
	for _, c := range cmds {
		s = strings.ReplaceAll(s, fmt.Sprintf("@want%d@", c.id), strconv.Itoa(c.want))
	}
	return s, cmds, where, nil
}

func boolDigit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// prelude: __dt runs one command of a doc and records its exit code and
// output; a raw line that fails stops the script through the ERR trap.
const prelude = `set -eo pipefail
__dt_err() { echo "ERR $1 $2" >>"$DT_DIR/results"; }
trap '__dt_err $LINENO $?' ERR
__dt_block() { echo "BLOCK $1" >>"$DT_DIR/results"; }
__dt() {
	local id=$1 want=$2 server=$3 code
	echo "+ $4"
	set +e
	if [ "$server" = 1 ]; then
		lethe() { if [ "$1" = server ]; then timeout --foreground --preserve-status -s INT "$DT_SERVER_SECONDS" "$(type -P lethe)" "$@"; else command lethe "$@"; fi; }
		eval "$4" >"$DT_DIR/$id.out" 2>&1
		code=$?
		unset -f lethe
	else
		eval "$4" >"$DT_DIR/$id.out" 2>&1
		code=$?
	fi
	set -e
	cat "$DT_DIR/$id.out"
	echo "RAN $id $code" >>"$DT_DIR/results"
	if [ "$code" != "$want" ]; then exit 97; fi
}
__dt_end() {
	local j
	for j in $(jobs -p); do kill -INT "$j" 2>/dev/null || true; done
	wait || true
}`

// runFile runs the blocks of one file in one bash, in a scratch home.
func runFile(t *testing.T, blocks []block) {
	s, cmds, where, err := script(blocks)
	require.NoError(t, err)
	base := t.TempDir()
	home := filepath.Join(base, "home", "you")
	work := filepath.Join(home, "lethe")
	dtDir := filepath.Join(base, "dt")
	for _, d := range []string{home, work, dtDir} {
		require.NoError(t, os.MkdirAll(d, 0o750))
	}
	farm(t, work)
	scriptPath := filepath.Join(dtDir, "script.sh")
	require.NoError(t, os.WriteFile(scriptPath, []byte(s), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dtDir, "results"), nil, 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), fileTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", scriptPath)
	cmd.Dir = work
	cmd.Env = sandbox(home, dtDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	runErr := cmd.Run()
	// Whatever a doc left running (a server, a plugin) goes with it.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	results, err := os.ReadFile(filepath.Join(dtDir, "results"))
	require.NoError(t, err)
	ran := map[int]int{}
	failedAt := ""
	sc := bufio.NewScanner(bytes.NewReader(results))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch f[0] {
		case "RAN":
			id, _ := strconv.Atoi(f[1])
			code, _ := strconv.Atoi(f[2])
			ran[id] = code
		case "ERR":
			n, _ := strconv.Atoi(f[1])
			failedAt = fmt.Sprintf("%s (script line %d) failed with exit code %s", where[n], n, f[2])
		}
	}
	count := 0
	for _, c := range cmds {
		code, ok := ran[c.id]
		if !ok {
			break
		}
		count++
		out, err := os.ReadFile(filepath.Join(dtDir, strconv.Itoa(c.id)+".out"))
		require.NoError(t, err)
		if code != c.want {
			t.Fatalf("%s\nexited %d, the doc says %d; it printed:\n%s", c, code, c.want, out)
		}
		if c.expect != nil && !c.server {
			if diff := compare(c.expect, string(out), home); diff != "" {
				t.Errorf("%s\nprinted what the doc does not show:\n%s\nit printed:\n%s", c, diff, out)
			}
		}
	}
	if failedAt != "" {
		t.Fatalf("%s\n--- the script's output (the last 60 lines):\n%s", failedAt, tail(log.String(), 60))
	}
	var ee *exec.ExitError
	if runErr != nil && !(errors.As(runErr, &ee) && ee.ExitCode() == 0) {
		t.Fatalf("the script stopped: %v\n--- its output (the last 60 lines):\n%s", runErr, tail(log.String(), 60))
	}
	require.Equal(t, len(cmds), count, "every command ran")
	t.Logf("%d commands checked", count)
}

func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// sandbox is the environment of a doc's shell: a scratch HOME, lethe on
// the PATH, Go's caches (go run in the docs) and nothing of Lethe's.
func sandbox(home, dtDir string) []string {
	env := []string{
		"HOME=" + home,
		"PATH=" + filepath.Join(dtDir, "path") + ":" + os.Getenv("PATH"),
		"TZ=UTC", "LANG=C.UTF-8",
		"DT_DIR=" + dtDir,
		"DT_SERVER_SECONDS=" + serverSeconds,
	}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOFLAGS", "GOTOOLCHAIN", "GOPROXY"} {
		v := os.Getenv(k)
		if v == "" {
			out, err := exec.Command("go", "env", k).Output()
			if err == nil {
				v = strings.TrimSpace(string(out))
			}
		}
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	_ = os.MkdirAll(filepath.Join(dtDir, "path"), 0o750)
	_ = os.Symlink(filepath.Join(built, "lethe"), filepath.Join(dtDir, "path", "lethe"))
	return env
}

// farm makes work a copy of the checkout made of symbolic links, with
// bin/ as `make build` leaves it (hard links to the binaries built once).
// docs/ and mutants/ are copied instead: what the docs run writes there
// (make mutation-sweep writes mutants/sweep/ and docs/mutation-sweep.md)
// would go through a link into the checkout.
func farm(t *testing.T, work string) {
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	for _, e := range entries {
		switch e.Name() {
		case "bin", ".demo":
			continue
		case "docs", "mutants":
			require.NoError(t, os.CopyFS(filepath.Join(work, e.Name()), os.DirFS(filepath.Join(root, e.Name()))))
			continue
		}
		require.NoError(t, os.Symlink(filepath.Join(root, e.Name()), filepath.Join(work, e.Name())))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(work, "bin", "plugins"), 0o750))
	link := func(from, to string) {
		if os.Link(from, to) != nil {
			b, err := os.ReadFile(from)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(to, b, 0o750))
		}
	}
	link(filepath.Join(built, "lethe"), filepath.Join(work, "bin", "lethe"))
	plugins, err := os.ReadDir(filepath.Join(built, "plugins"))
	require.NoError(t, err)
	for _, p := range plugins {
		link(filepath.Join(built, "plugins", p.Name()), filepath.Join(work, "bin", "plugins", p.Name()))
	}
}

// Normalisation of output, on both sides.
var normal = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "TIME"},
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "UID"},
	{regexp.MustCompile(`\b[0-9a-f]{64}\b`), "SHA256"},
	{regexp.MustCompile(`\blocked [0-9a-f]{12}\b`), "locked SHA"},
	{regexp.MustCompile(`\bpid \d+ ns \d+`), "pid N ns N"},
	{regexp.MustCompile(`\b\d+(\.\d+)?(d|h|m|s|ms|µs)(\d+(\.\d+)?(h|m|s|ms|µs))*\b`), "DUR"},
	{regexp.MustCompile(`\s+`), " "},
}

func normalise(s string) string {
	for _, n := range normal {
		s = n.re.ReplaceAllString(s, n.with)
	}
	return strings.TrimSpace(s)
}

// compare matches what a command printed against what the doc shows; ""
// when they agree.
func compare(doc []string, got, home string) string {
	got = strings.ReplaceAll(got, home, "/home/you")
	var g []string
	for _, l := range strings.Split(strings.TrimRight(got, "\n"), "\n") {
		g = append(g, normalise(l))
	}
	var d []*regexp.Regexp
	var dText []string
	for _, l := range doc {
		l = strings.TrimSpace(l)
		if l == "..." {
			d, dText = append(d, nil), append(dText, l)
			continue
		}
		parts := strings.Split(normalise(l), "…")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		d, dText = append(d, regexp.MustCompile("^"+strings.Join(parts, ".*")+"$")), append(dText, l)
	}
	if len(doc) == 0 {
		if strings.TrimSpace(got) == "" {
			return ""
		}
		return "the doc shows no output"
	}
	if match(d, g) {
		return ""
	}
	// Say where they part: the first doc line no output line matches in
	// order.
	gi := 0
	for i, re := range d {
		if re == nil {
			continue
		}
		found := false
		for ; gi < len(g); gi++ {
			if re.MatchString(g[gi]) {
				found = true
				gi++
				break
			}
		}
		if !found {
			return fmt.Sprintf("doc line %d not printed (normalised: %q)", i+1, normalise(dText[i]))
		}
	}
	return "the output has more or other lines than the doc shows (no `...` for them)"
}

// match: the doc's lines (nil: "...", any lines) match the output's.
func match(d []*regexp.Regexp, g []string) bool {
	if len(d) == 0 {
		return len(g) == 0
	}
	if d[0] == nil {
		for i := 0; i <= len(g); i++ {
			if match(d[1:], g[i:]) {
				return true
			}
		}
		return false
	}
	return len(g) > 0 && d[0].MatchString(g[0]) && match(d[1:], g[1:])
}

// checkoutStatus is git status of the checkout, untracked files included.
func checkoutStatus(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=all").Output()
	require.NoError(t, err, "git status of the checkout")
	return string(out)
}

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// manifestCap is lethe's cap on one manifest file (manifest.DefaultLimits).
const manifestCap = 8 << 20

// hostileManifest is one input of the corpus: a name, and the file's text,
// each close to the 8 MiB cap.
type hostileManifest struct {
	name string
	text func() string
}

// fill repeats unit after head up to the cap (leaving room for tail).
func fill(head, unit, tail string) string {
	var b strings.Builder
	b.WriteString(head)
	n := (manifestCap - len(head) - len(tail) - 16) / len(unit)
	b.WriteString(strings.Repeat(unit, n))
	b.WriteString(tail)
	return b.String()
}

// hostileManifests: the shapes that make a YAML library build far more
// than the bytes suggest. Each is under the cap and must be refused.
var hostileManifests = []hostileManifest{
	// The security review's exploit: 8 MiB of "1,".
	{"flow-list", func() string { return fill("kind: ConfigMap\nmetadata: {name: a}\nspec: {x: [", "1,", "1]}\n") }},
	{"flow-mapping", func() string {
		var b strings.Builder
		b.WriteString("kind: ConfigMap\nmetadata: {name: a}\nspec: {")
		for i := 0; b.Len() < manifestCap-64; i++ {
			fmt.Fprintf(&b, "k%d: 1, ", i)
		}
		b.WriteString("z: 1}\n")
		return b.String()
	}},
	{"block-list", func() string { return fill("kind: ConfigMap\nmetadata: {name: a}\nspec:\n  x:\n", "  - 1\n", "") }},
	{"empty-entries", func() string { return fill("kind: ConfigMap\nmetadata: {name: a}\nspec:\n  x:\n", "  -\n", "") }},
	{"deep-flow", func() string { return fill("", "[", "") }},
	{"deep-block", func() string { return fill("", "- ", "1\n") }},
	// Billion laughs: nine levels of ten aliases, a few hundred bytes.
	{"alias-bomb", func() string {
		var b strings.Builder
		b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
		for i := 1; i < 9; i++ {
			fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
		}
		return b.String()
	}},
	// Many small aliases of one anchor: cheap to write, each a node.
	{"alias-list", func() string {
		return fill("kind: ConfigMap\nmetadata: {name: a}\nspec: {a: &a x, x: [", "*a,", "*a]}\n")
	}},
	{"huge-key", func() string { return fill("kind: ConfigMap\nmetadata: {name: a}\nspec: {\"", "k", "\": 1}\n") }},
	{"huge-plain-key", func() string { return fill("kind: ConfigMap\nmetadata: {name: a}\nspec:\n  ", "k", ": 1\n") }},
	{"empty-documents", func() string { return fill("", "---\n", "") }},
	{"many-documents", func() string { return fill("", "--- {}\n", "") }},
	// Many documents of a list each just under the per-document bound.
	{"split-flow-lists", func() string {
		doc := "---\nkind: ConfigMap\nmetadata: {name: a}\nspec: {x: [" + strings.Repeat("1,", 45_000) + "1]}\n"
		return strings.Repeat(doc, (manifestCap-16)/len(doc))
	}},
	{"json-array", func() string { return fill("[", "{},", "{}]") }},
}

// benignManifests is the largest ordinary file apply accepts: small
// ConfigMaps up to the 8 MiB cap (55,258 of them).
func benignManifests() string {
	var b strings.Builder
	for i := 0; b.Len() < manifestCap-512; i++ {
		fmt.Fprintf(&b, "---\nkind: ConfigMap\nmetadata:\n  name: cm-%d\n  namespace: prod\n  labels: {app: shop, tier: web}\nspec:\n  data:\n    key1: value-one\n    list: [a, b, c]\n", i)
	}
	return b.String()
}

// usage is what one lethe process cost.
type usage struct {
	maxRSS int64   // bytes
	cpu    float64 // user + system seconds
}

// measureEnv, set in the environment of this test binary, makes it run
// the command of its arguments and write that process's peak RSS (bytes)
// and CPU seconds to the file the variable names (see measureMain).
const measureEnv = "LETHE_E2E_MEASURE"

// measureMain runs os.Args[1:] and writes "maxrss cpu" to out, exiting
// with the command's code. Why a process in between: Linux starts a
// child's ru_maxrss at the high-water mark of the process that forked it
// (Go forks with vfork semantics, so exec records the parent's mm), and
// this test process may have grown large. This small process forks lethe,
// so the number is lethe's own peak (or this process's, if larger: about
// 10 MiB).
func measureMain(out string) int {
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		fmt.Fprintln(os.Stderr, "measure:", err)
		return 125
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	if err := os.WriteFile(out, fmt.Appendf(nil, "%d %f", ru.Maxrss*1024, cpu), 0o600); err != nil { // Maxrss is in KiB on Linux
		fmt.Fprintln(os.Stderr, "measure:", err)
		return 125
	}
	return cmd.ProcessState.ExitCode()
}

// runLetheMeasured runs lethe with home as LETHE_HOME, through this test
// binary as measureMain, and returns its exit code, its stderr and what
// it cost.
func runLetheMeasured(tb testing.TB, home string, args ...string) (int, string, usage) {
	tb.Helper()
	return runLetheMeasuredWithin(tb, cmdTimeout, home, args...)
}

// runLetheMeasuredWithin is runLetheMeasured with its own time limit.
func runLetheMeasuredWithin(tb testing.TB, limit time.Duration, home string, args ...string) (int, string, usage) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	self, err := os.Executable()
	require.NoError(tb, err)
	report := filepath.Join(tb.TempDir(), "usage")
	cmd := exec.CommandContext(ctx, self, append([]string{filepath.Join(bin, "lethe")}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LETHE_HOME=" + home, "TZ=UTC", measureEnv + "=" + report}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		code = ee.ExitCode()
	default:
		tb.Fatalf("lethe %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	require.NotEqual(tb, 125, code, errb.String())
	b, err := os.ReadFile(report)
	require.NoError(tb, err)
	var u usage
	_, err = fmt.Sscan(string(b), &u.maxRSS, &u.cpu)
	require.NoError(tb, err)
	return code, errb.String(), u
}

// TestHostileManifestsAreRefusedWithinAMemoryBound: every hostile manifest
// of the corpus, each under the 8 MiB cap, is refused by `lethe apply -f`
// with one line and exit code 1, and the process never holds more than
// 100 MiB. Before values were bounded from the raw bytes, 8 MiB of "1,"
// took 915 MB.
func TestHostileManifestsAreRefusedWithinAMemoryBound(t *testing.T) {
	const bound = 100 << 20
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	for _, h := range hostileManifests {
		t.Run(h.name, func(t *testing.T) {
			text := h.text()
			require.LessOrEqual(t, len(text), manifestCap, "the corpus stays under the cap")
			f := filepath.Join(dir, h.name+".yaml")
			require.NoError(t, os.WriteFile(f, []byte(text), 0o600))
			code, stderr, u := runLetheMeasured(t, home, "apply", "-f", f)
			t.Logf("%s: exit %d, peak RSS %d MiB, CPU %.2fs: %s", h.name, code, u.maxRSS>>20, u.cpu, strings.TrimSpace(stderr))
			require.Equal(t, 1, code, "refused as a bad manifest: %s", stderr)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			require.Less(t, u.maxRSS, int64(bound), "peak RSS of lethe apply -f %s", h.name)
			_ = os.Remove(f)
		})
	}
	// A folder of eight files, each of lists just under every per-file
	// bound: 22 MiB, far under the folder's 64 MiB cap, refused as a whole
	// before any file is parsed.
	t.Run("folder", func(t *testing.T) {
		folder := filepath.Join(dir, "folder")
		require.NoError(t, os.Mkdir(folder, 0o700))
		doc := "---\nkind: ConfigMap\nmetadata: {name: a}\nspec: {x: [" + strings.Repeat("1,", 45_000) + "1]}\n"
		for i := range 8 {
			require.NoError(t, os.WriteFile(filepath.Join(folder, fmt.Sprintf("f%d.yaml", i)), []byte(strings.Repeat(doc, 32)), 0o600))
		}
		code, stderr, u := runLetheMeasured(t, home, "apply", "-f", folder)
		t.Logf("folder: exit %d, peak RSS %d MiB, CPU %.2fs: %s", code, u.maxRSS>>20, u.cpu, strings.TrimSpace(stderr))
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "values together; apply fewer files at once")
		require.Less(t, u.maxRSS, int64(bound))
	})
}

// TestLargestOrdinaryManifestIsAppliedWithinAMemoryBound: the largest
// ordinary file under the cap (benignManifests: 55,258 small ConfigMaps)
// is applied by `lethe apply -f`, dry run and create, on SQLite, and the
// process never holds 100 MiB (it took 107 MiB and 136 MiB before the
// input was packed and unpacked a chunk at a time). CPU is the
// benchmark's (BenchmarkApplyLargeFile), not a test's.
func TestLargestOrdinaryManifestIsAppliedWithinAMemoryBound(t *testing.T) {
	const bound = 100 << 20
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	f := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(f, []byte(benignManifests()), 0o600))
	for _, args := range [][]string{{"apply", "-f", f, "--dry-run"}, {"apply", "-f", f}} {
		code, stderr, u := runLetheMeasuredWithin(t, 10*time.Minute, home, args...)
		t.Logf("%s: exit %d, peak RSS %d MiB, CPU %.2fs", strings.Join(args, " "), code, u.maxRSS>>20, u.cpu)
		require.Equal(t, 0, code, stderr)
		require.Less(t, u.maxRSS, int64(bound), "peak RSS of lethe %s", strings.Join(args, " "))
	}
	code, out, stderr := runLetheOutput(t, home, "get", "ConfigMap", "cm-55257", "-n", "prod", "-o", "json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"tier": "web"`, "the last document was created as written")
}

// BenchmarkHostileManifests runs `lethe apply -f` on each hostile manifest
// of the corpus and reports the worst peak RSS and CPU time among them
// (the budget: 100 MiB and 2 s of CPU for any input under the cap), and
// the same for an 8 MiB file of ordinary small manifests (55,258
// ConfigMaps), accepted: a dry run, and the apply that creates them (on
// SQLite; BenchmarkApplyLargeFile has PostgreSQL and medians).
//
//	make bench BENCH=HostileManifests BENCHPKGS=./internal/e2e/
func BenchmarkHostileManifests(b *testing.B) {
	dir := b.TempDir()
	home := filepath.Join(dir, "home")
	files := map[string]string{}
	for _, h := range hostileManifests {
		f := filepath.Join(dir, h.name+".yaml")
		require.NoError(b, os.WriteFile(f, []byte(h.text()), 0o600))
		files[h.name] = f
	}
	benignFile := filepath.Join(dir, "benign.yaml")
	require.NoError(b, os.WriteFile(benignFile, []byte(benignManifests()), 0o600))
	for b.Loop() {
		var worst usage
		var worstRSS, worstCPU string
		for _, h := range hostileManifests {
			code, stderr, u := runLetheMeasured(b, home, "apply", "-f", files[h.name])
			require.Equal(b, 1, code, "%s: %s", h.name, stderr)
			if u.maxRSS > worst.maxRSS {
				worst.maxRSS, worstRSS = u.maxRSS, h.name
			}
			if u.cpu > worst.cpu {
				worst.cpu, worstCPU = u.cpu, h.name
			}
		}
		b.Logf("worst peak RSS %d MiB (%s), worst CPU %.2fs (%s)", worst.maxRSS>>20, worstRSS, worst.cpu, worstCPU)
		b.ReportMetric(float64(worst.maxRSS)/(1<<20), "hostile-max-MiB")
		b.ReportMetric(worst.cpu, "hostile-max-cpu-s")
		code, stderr, u := runLetheMeasured(b, home, "apply", "-f", benignFile, "--dry-run")
		require.Equal(b, 0, code, stderr)
		b.ReportMetric(float64(u.maxRSS)/(1<<20), "benign-8MiB-MiB")
		b.ReportMetric(u.cpu, "benign-8MiB-cpu-s")
		// The same file applied: 55,258 creates in one transaction.
		code, stderr, u = runLetheMeasuredWithin(b, 10*time.Minute, filepath.Join(b.TempDir(), "home"), "apply", "-f", benignFile)
		require.Equal(b, 0, code, stderr)
		b.Logf("benign create: peak RSS %d MiB, CPU %.2fs", u.maxRSS>>20, u.cpu)
		b.ReportMetric(float64(u.maxRSS)/(1<<20), "benign-8MiB-create-MiB")
		b.ReportMetric(u.cpu, "benign-8MiB-create-cpu-s")
	}
}

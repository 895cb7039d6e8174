package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkCascadeThroughBinary measures the cascade as a user runs it,
// through the `lethe` binary: `lethe apply -f` of a graph of ROOTS roots
// (kind Root, label tier=root) with DEPENDENTS dependents each (kind Leaf,
// owned by their root), then `lethe delete Root -l tier=root --yes --wait`
// (foreground, the default), up to the last purge. No plugin. The graph
// is LETHE_BENCH_CASCADE=ROOTSxDEPENDENTS (default 100x100; the budget of
// issue 27 is for 1000x1000). The apply is one `lethe apply -f FILE` per
// file of at most 50,000 documents (a file holds at most 100,000, and one
// apply 5,000,000 values). It reports, per catalog (SQLite, and PostgreSQL
// when LETHE_TEST_POSTGRES_URL is set), the rates in resources/s and each
// step's peak RSS, the median of LETHE_BENCH_ROUNDS fresh catalogs
// (default 3).
//
//	LETHE_BENCH_CASCADE=1000x1000 make bench BENCH=CascadeThroughBinary BENCHPKGS=./internal/e2e/ BENCHTIME=1x
func BenchmarkCascadeThroughBinary(b *testing.B) {
	roots, deps := 100, 100
	if v := os.Getenv("LETHE_BENCH_CASCADE"); v != "" {
		r, d, ok := strings.Cut(v, "x")
		var err1, err2 error
		roots, err1 = strconv.Atoi(r)
		deps, err2 = strconv.Atoi(d)
		if !ok || err1 != nil || err2 != nil || roots < 1 || deps < 0 {
			b.Fatalf("LETHE_BENCH_CASCADE=%q: use ROOTSxDEPENDENTS, e.g. 1000x1000", v)
		}
	}
	rounds := envInt("LETHE_BENCH_ROUNDS", 3)
	files := writeCascadeGraph(b, b.TempDir(), roots, deps, 50_000)
	total := float64(roots * (deps + 1))
	catalogs := []string{"sqlite"}
	if os.Getenv("LETHE_TEST_POSTGRES_URL") != "" {
		catalogs = append(catalogs, "postgres")
	}
	for b.Loop() {
		for _, cat := range catalogs {
			var applyRate, deleteRate, applyRSS, deleteRSS []float64
			for round := range rounds {
				home := filepath.Join(b.TempDir(), "home")
				var store []string
				if cat == "postgres" {
					store = []string{"--store", createDatabase(b, os.Getenv("LETHE_TEST_POSTGRES_URL"))}
					code, stderr, _ := runLetheMeasured(b, home, append([]string{"migrate"}, store...)...)
					require.Equal(b, 0, code, stderr)
				}
				start := time.Now()
				var peak int64
				for _, f := range files {
					code, stderr, u := runLetheMeasuredWithin(b, time.Hour, home, append([]string{"apply", "-f", f}, store...)...)
					require.Equal(b, 0, code, "%s apply %s: %s", cat, f, stderr)
					peak = max(peak, u.maxRSS)
				}
				applied := time.Since(start)
				applyRate = append(applyRate, total/applied.Seconds())
				applyRSS = append(applyRSS, float64(peak)/(1<<20))

				start = time.Now()
				code, stderr, u := runLetheMeasuredWithin(b, time.Hour, home,
					append([]string{"delete", "Root", "-l", "tier=root", "-n", "bench", "--yes", "--wait"}, store...)...)
				require.Equal(b, 0, code, "%s delete: %s", cat, stderr)
				deleted := time.Since(start)
				deleteRate = append(deleteRate, total/deleted.Seconds())
				deleteRSS = append(deleteRSS, float64(u.maxRSS)/(1<<20))

				// Nothing is left: every root and leaf was purged.
				for _, kind := range []string{"Root", "Leaf"} {
					code, out, _ := runLetheOutput(b, home, append([]string{"get", kind, "-n", "bench", "-o", "name"}, store...)...)
					require.Equal(b, 0, code)
					require.Empty(b, strings.TrimSpace(out), "%s %s left after the cascade", cat, kind)
				}
				b.Logf("%s %dx%d round %d: apply %.0f resources/s (%s, peak RSS %d MiB), delete %.0f resources/s (%s, peak RSS %d MiB, CPU %.1fs)",
					cat, roots, deps, round+1, total/applied.Seconds(), applied.Round(time.Millisecond), peak>>20,
					total/deleted.Seconds(), deleted.Round(time.Millisecond), u.maxRSS>>20, u.cpu)
			}
			b.ReportMetric(median(applyRate), cat+"-apply-resources/s")
			b.ReportMetric(median(applyRSS), cat+"-apply-MiB")
			b.ReportMetric(median(deleteRate), cat+"-delete-resources/s")
			b.ReportMetric(median(deleteRSS), cat+"-delete-MiB")
		}
	}
}

// runLetheOutput runs lethe with home as LETHE_HOME and returns its exit
// code, stdout and stderr.
func runLetheOutput(tb testing.TB, home string, args ...string) (int, string, string) {
	tb.Helper()
	cmd := exec.Command(filepath.Join(bin, "lethe"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LETHE_HOME=" + home, "TZ=UTC"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		tb.Fatalf("lethe %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// writeCascadeGraph writes the graph of BenchmarkCascadeThroughBinary to
// files of at most perFile documents in dir, and returns their paths in
// order (every root before its leaves).
func writeCascadeGraph(tb testing.TB, dir string, roots, deps, perFile int) []string {
	tb.Helper()
	var paths []string
	var f *os.File
	var w *bufio.Writer
	docs := perFile
	next := func() {
		if f != nil {
			require.NoError(tb, w.Flush())
			require.NoError(tb, f.Close())
		}
		p := filepath.Join(dir, fmt.Sprintf("graph-%03d.yaml", len(paths)))
		var err error
		f, err = os.Create(p)
		require.NoError(tb, err)
		w = bufio.NewWriterSize(f, 1<<20)
		paths = append(paths, p)
		docs = 0
	}
	for r := range roots {
		if docs+deps+1 > perFile {
			next()
		}
		fmt.Fprintf(w, "---\nkind: Root\nmetadata:\n  name: r-%05d\n  namespace: bench\n  labels: {tier: root}\n", r)
		for d := range deps {
			fmt.Fprintf(w, "---\nkind: Leaf\nmetadata:\n  name: l-%05d-%05d\n  namespace: bench\n  ownerReferences: [{kind: Root, name: r-%05d}]\n", r, d, r)
		}
		docs += deps + 1
	}
	require.NoError(tb, w.Flush())
	require.NoError(tb, f.Close())
	return slices.Clip(paths)
}

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// applyLargeRounds is how many times each step runs; the median is
// reported.
const applyLargeRounds = 3

// BenchmarkApplyLargeFile runs `lethe apply` through the binary on the
// largest ordinary file it accepts (benignManifests: 8 MiB, 55,258 small
// ConfigMaps) and reports the median peak RSS and CPU seconds, over
// three fresh catalogs, of four steps: `--dry-run` on an empty catalog,
// the apply that creates them all, the same apply again (all unchanged),
// and `--dry-run` again on the full catalog. The budget (issue 23): 100
// MiB and 2 s of CPU. SQLite, and PostgreSQL when LETHE_TEST_POSTGRES_URL
// is set (only lethe's own CPU is counted, not the server's).
//
//	make bench BENCH=ApplyLargeFile BENCHPKGS=./internal/e2e/
func BenchmarkApplyLargeFile(b *testing.B) {
	dir := b.TempDir()
	file := filepath.Join(dir, "big.yaml")
	require.NoError(b, os.WriteFile(file, []byte(benignManifests()), 0o600))
	steps := []struct {
		name string
		args []string
	}{
		{"dryrun-empty", []string{"apply", "-f", file, "--dry-run"}},
		{"create", []string{"apply", "-f", file}},
		{"unchanged", []string{"apply", "-f", file}},
		{"dryrun-full", []string{"apply", "-f", file, "--dry-run"}},
	}
	catalogs := []string{"sqlite"}
	if os.Getenv("LETHE_TEST_POSTGRES_URL") != "" {
		catalogs = append(catalogs, "postgres")
	}
	for b.Loop() {
		for _, cat := range catalogs {
			rss := make([][]float64, len(steps))
			cpu := make([][]float64, len(steps))
			for round := range applyLargeRounds {
				home := filepath.Join(b.TempDir(), "home")
				var store []string
				if cat == "postgres" {
					store = []string{"--store", createDatabase(b, os.Getenv("LETHE_TEST_POSTGRES_URL"))}
					code, stderr, _ := runLetheMeasured(b, home, append([]string{"migrate"}, store...)...)
					require.Equal(b, 0, code, stderr)
				}
				for i, s := range steps {
					code, stderr, u := runLetheMeasuredWithin(b, 10*time.Minute, home, append(slices.Clone(s.args), store...)...)
					require.Equal(b, 0, code, "%s %s: %s", cat, s.name, stderr)
					b.Logf("%s %s round %d: peak RSS %d MiB, CPU %.2fs", cat, s.name, round+1, u.maxRSS>>20, u.cpu)
					rss[i] = append(rss[i], float64(u.maxRSS)/(1<<20))
					cpu[i] = append(cpu[i], u.cpu)
				}
			}
			for i, s := range steps {
				unit := cat + "-" + s.name
				b.ReportMetric(median(rss[i]), unit+"-MiB")
				b.ReportMetric(median(cpu[i]), unit+"-cpu-s")
			}
		}
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

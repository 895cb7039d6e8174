package retention

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkPlan1MBackupsIn10kGroups is the budget case: the plan
// of a GFS policy for 1M backups in 10,000 groups (100 nightlies each).
func BenchmarkPlan1MBackupsIn10kGroups(b *testing.B) {
	const groups, per = 10000, 100
	bs := make([]Backup, 0, groups*per)
	t0 := time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC)
	for g := range groups {
		lbl := map[string]string{DefaultGroupBy: fmt.Sprintf("s-%05d", g)}
		for i := range per {
			bs = append(bs, Backup{Name: fmt.Sprintf("s-%05d-%03d", g, i), Created: t0.AddDate(0, 0, i), Phase: PhaseCompleted, Labels: lbl})
		}
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	p := &Policy{Name: "gfs", GroupBy: []string{DefaultGroupBy}, TimeZone: berlin, CountPhases: DefaultCountPhases(),
		FailedRetention: DefaultFailedRetention, MinSuccessful: 3,
		Rules: Rules{Last: 3, Daily: 7, Weekly: 5, Monthly: 12, Yearly: 2}}
	now := t0.AddDate(1, 0, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		plan := Evaluate(p, bs, now)
		if len(plan.Items) != len(bs) {
			b.Fatal(len(plan.Items))
		}
	}
	b.ReportMetric(float64(len(bs)*b.N)/b.Elapsed().Seconds(), "backups/s")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
}

package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEveryMetricIsDocumented scrapes a real `lethe server` (with
// --federation, so that the peer metrics are there too) and requires each
// lethe_* metric family it exposes to be named in docs/operations.md's
// table and in the README's: an operator reads those to write alerts, and
// a metric added without them is one nobody knows of. (Families that
// appear only with their first event, such as per-plugin items, are
// checked when they are exposed.)
func TestEveryMetricIsDocumented(t *testing.T) {
	ca := newTestCA(t)
	usAddr, euAddr := freePort(t), freePort(t)
	us := newFedPeer(t, ca, "us", "us", usAddr, "eu="+euAddr)
	srv := us.server(t)

	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + us.metrics + "/metrics")
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, rerr)
			// The peer gauges come from the catalog, the rest at start.
			if resp.StatusCode == http.StatusOK && regexp.MustCompile(`(?m)^lethe_peer_outbox_pending`).Match(b) {
				body = string(b)
				break
			}
		}
		if srv.exited() || time.Now().After(deadline) {
			t.Fatalf("no metrics from lethe server (exited: %v): %v", srv.exited(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	exposed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (lethe_\w+) `).FindAllStringSubmatch(body, -1) {
		exposed[m[1]] = true
	}
	require.NotEmpty(t, exposed)

	name := regexp.MustCompile("`(lethe_[a-z0-9_]+)")
	for _, doc := range []string{"docs/operations.md", "README.md"} {
		b, err := os.ReadFile(filepath.Join("..", "..", doc))
		require.NoError(t, err)
		documented := map[string]bool{}
		for _, m := range name.FindAllStringSubmatch(string(b), -1) {
			documented[m[1]] = true
		}
		var missing []string
		for n := range exposed {
			if !documented[n] {
				missing = append(missing, n)
			}
		}
		sort.Strings(missing)
		require.Empty(t, missing, "%s does not name these metrics that lethe server exposes", doc)
	}
}

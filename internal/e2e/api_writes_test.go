package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
)

// TestAPIWrites: the retry queue and deletion requests through the API
// are the CLI's: the same rows and objects, dryRun changes nothing, a
// viewer is refused, and each write is audited with the token's name.
func TestAPIWrites(t *testing.T) {
	catalogBackends(t, func(t *testing.T, e *env, _ func() string) {
		copyFile(t, filepath.Join(bin, pluginRecorder), filepath.Join(e.pluginDir(), pluginRecorder), 0o750)
		e.ok("plugin", "lock")
		e.create("stuck", 6)
		e.create("next", 3)
		bad := archivetest.SpecN(2, 200).Name
		require.NoError(t, os.WriteFile(filepath.Join(e.control, bad+".fail"), nil, 0o600))
		r := e.run("backup", "delete", "stuck", "--yes")
		require.Equal(t, 3, r.code, "%s", r)
		rows := e.retryRows()
		require.Len(t, rows, 1)
		id := strconv.FormatInt(rows[0].ID, 10)
		op := createToken(t, e, "op", "operator")
		viewer := createToken(t, e, "dash", "viewer")
		c := startAPI(t, e, "--retry-backoff", "1h")

		// Explain, plugins and locations: the CLI's objects.
		// (The server's collector may move the backup on between the two
		// reads: they must agree once it settles.)
		var cliX, apiX string
		for try := 0; try < 50; try++ {
			xr := c.do("GET", "/api/v1/resources/Backup/stuck/explain", viewer)
			require.Equal(t, http.StatusOK, xr.code, xr.body)
			cliX, apiX = e.ok("explain", "backup", "stuck", "-o", "json").stdout, xr.body
			if jsonEqual(cliX, apiX) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		assert.JSONEq(t, cliX, apiX)
		requireProblem(t, c.do("GET", "/api/v1/resources/Backup/nope/explain", viewer), http.StatusNotFound, "")
		pl := c.do("GET", "/api/v1/plugins", viewer)
		require.Equal(t, http.StatusOK, pl.code, pl.body)
		assert.JSONEq(t, e.ok("plugin", "list", "-o", "json").stdout, pl.body)
		var locs struct {
			Kind  string
			Items []struct {
				Kind, Name, Phase string
				Backups           int
			}
		}
		c.do("GET", "/api/v1/locations", viewer).json(t, &locs)
		assert.Equal(t, "LocationStatusList", locs.Kind)
		require.Len(t, locs.Items, 1)
		assert.Equal(t, "LocationStatus", locs.Items[0].Kind)
		assert.Equal(t, "default", locs.Items[0].Name)
		assert.Equal(t, "Available", locs.Items[0].Phase)
		assert.Equal(t, 2, locs.Items[0].Backups)

		// The queue, as retry list -o json prints it.
		lr := c.do("GET", "/api/v1/retries", viewer)
		require.Equal(t, http.StatusOK, lr.code, lr.body)
		var list struct {
			Kind  string
			Items []retryRowJSON
		}
		lr.json(t, &list)
		assert.Equal(t, "RetryItemList", list.Kind)
		require.Len(t, list.Items, 1)
		assert.Equal(t, rows[0].ID, list.Items[0].ID)
		assert.Equal(t, "Backup/stuck", list.Items[0].Key)
		requireProblem(t, c.do("GET", "/api/v1/retries?state=bogus", viewer), http.StatusBadRequest, "state")

		// Discard: a viewer is refused, a dry run changes nothing.
		requireProblem(t, c.do("POST", "/api/v1/retries/"+id+"/discard", viewer), http.StatusForbidden, "operator")
		var row retryRowJSON
		dr := c.do("POST", "/api/v1/retries/"+id+"/discard?dryRun=true", op)
		require.Equal(t, http.StatusOK, dr.code, dr.body)
		dr.json(t, &row)
		assert.Equal(t, "discarded", row.State, "the row as it would be")
		assert.Equal(t, "retryable", e.retryRows()[0].State, "a dry run changes nothing")
		dr = c.do("POST", "/api/v1/retries/"+id+"/discard", op)
		require.Equal(t, http.StatusOK, dr.code, dr.body)
		assert.Equal(t, "discarded", e.retryRows()[0].State)
		// Retry now: the row is due again, with fresh attempts.
		require.NoError(t, os.Remove(filepath.Join(e.control, bad+".fail")))
		nr := c.do("POST", "/api/v1/retries/"+id+"/retry", op)
		require.Equal(t, http.StatusOK, nr.code, nr.body)
		nr.json(t, &row)
		assert.Equal(t, "retryable", row.State)
		assert.Equal(t, 0, row.Attempts)
		requireProblem(t, c.do("POST", "/api/v1/retries/abc/retry", op), http.StatusBadRequest, "retry row id")
		requireProblem(t, c.do("POST", "/api/v1/retries/99999/retry", op), http.StatusNotFound, "")

		// A deletion request: the plan first (nothing changes), then the
		// request, which the server runs.
		pr := c.do("POST", "/api/v1/backups/next/deletion?dryRun=true", op)
		require.Equal(t, http.StatusOK, pr.code, pr.body)
		var plan struct {
			Kind       string
			TotalItems int64
		}
		pr.json(t, &plan)
		assert.Equal(t, "DeletionPlan", plan.Kind)
		assert.EqualValues(t, 3, plan.TotalItems)
		assert.Equal(t, "Active", e.get("next").Phase)
		requireProblem(t, c.do("POST", "/api/v1/backups/next/deletion", viewer), http.StatusForbidden, "operator")
		requireProblem(t, c.do("POST", "/api/v1/backups/next/deletion?dryRun=maybe", op), http.StatusBadRequest, "dryRun")
		dq := c.do("POST", "/api/v1/backups/next/deletion", op)
		require.Equal(t, http.StatusAccepted, dq.code, dq.body)
		var rep struct{ Kind, Backup, Result string }
		dq.json(t, &rep)
		assert.Equal(t, "DeletionReport", rep.Kind)
		assert.Equal(t, "next", rep.Backup)
		// The server runs the queued deletion at once: the CLI sees it
		// Deleting, or already purged (exit 4).
		if g := e.run("backup", "get", "next", "-o", "json"); g.code == 0 {
			assert.NotContains(t, g.stdout, `"phase": "Active"`)
		} else {
			require.Equal(t, 4, g.code, "%s", g)
			assert.Contains(t, g.stderr, "was purged")
		}

		// Each write is in the audit log with the token's name.
		var audit struct {
			Items []struct{ Actor, Action string }
		}
		c.do("GET", "/api/v1/audit?kind=Backup&name=next", viewer).json(t, &audit)
		var actors []string
		for _, it := range audit.Items {
			actors = append(actors, it.Actor)
		}
		assert.Contains(t, actors, "token:op")
		out := e.ok("audit", "--kind", "Backup", "--name", "stuck").stdout
		assert.Contains(t, out, "token:op")
	})
}

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}

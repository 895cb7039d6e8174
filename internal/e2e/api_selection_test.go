package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/retry"
)

// failItems makes items 1 to n of every backup fail in the recorder,
// and the others succeed.
func (e *env) failItems(n int) {
	e.t.Helper()
	old, err := filepath.Glob(filepath.Join(e.control, "*.fail"))
	require.NoError(e.t, err)
	for _, f := range old {
		require.NoError(e.t, os.Remove(f))
	}
	for i := 1; i <= n; i++ {
		require.NoError(e.t, os.WriteFile(filepath.Join(e.control, archivetest.SpecN(i, 200).Name+".fail"), nil, 0o600))
	}
}

// retryStates maps each retry row's ID to its state, as the CLI lists
// them.
func (e *env) retryStates() map[int64]string {
	e.t.Helper()
	m := map[int64]string{}
	for _, r := range e.retryRows() {
		m[r.ID] = r.State
	}
	return m
}

// TestAPIRetrySelection: a bulk discard acts on exactly the frozen
// selection: rows that match its query but came after it are left
// alone; a count or hash that is not the selection's is refused (409)
// and changes nothing; a selection is used once; a viewer can neither
// select nor act; each discard is audited with the token's name.
func TestAPIRetrySelection(t *testing.T) {
	catalogBackends(t, func(t *testing.T, e *env, _ func() string) {
		copyFile(t, filepath.Join(bin, pluginRecorder), filepath.Join(e.pluginDir(), pluginRecorder), 0o750)
		e.ok("plugin", "lock")
		e.create("first", 6)
		e.create("second", 6)
		e.failItems(3)
		r := e.run("backup", "delete", "first", "--yes", "--retry-backoff", "1h")
		require.Equal(t, 3, r.code, "%s", r)
		before := e.retryStates()
		require.Len(t, before, 3)
		op := createToken(t, e, "op", "operator")
		viewer := createToken(t, e, "dash", "viewer")
		c := startAPI(t, e, "--retry-backoff", "1h")

		requireProblem(t, c.do("POST", "/api/v1/retries/selections?state=retryable", viewer), http.StatusForbidden, "operator")
		requireProblem(t, c.do("POST", "/api/v1/retries/selections?state=bogus", op), http.StatusBadRequest, "state")
		var sel struct {
			ID    string
			Count int
			Hash  string
			IDs   []int64
			Query struct{ State string }
		}
		sr := c.do("POST", "/api/v1/retries/selections?state=retryable", op)
		require.Equal(t, http.StatusCreated, sr.code, sr.body)
		sr.json(t, &sel)
		assert.Equal(t, "retryable", sel.Query.State)
		require.Equal(t, 3, sel.Count)
		var frozen []int64
		for id := range before {
			frozen = append(frozen, id)
		}
		assert.ElementsMatch(t, frozen, sel.IDs)
		assert.Equal(t, retry.SelectionHash(frozen), sel.Hash)
		assert.Equal(t, "/api/v1/retries/selections/"+sel.ID, sr.header.Get("Location"))
		c.do("GET", "/api/v1/retries/selections/"+sel.ID, viewer).json(t, &sel)
		require.Equal(t, 3, sel.Count, "a viewer reads a selection")

		// Rows that match the query arrive after the selection: the
		// server deletes second, two of whose items fail.
		e.failItems(2)
		dq := c.do("POST", "/api/v1/backups/second/deletion", op)
		require.Equal(t, http.StatusAccepted, dq.code, dq.body)
		var all map[int64]string
		require.Eventually(t, func() bool { all = e.retryStates(); return len(all) == 5 }, 30*time.Second, 100*time.Millisecond,
			"the server's deletion of second left no two retry rows")
		n := 0
		for _, s := range all {
			if s == "retryable" {
				n++
			}
		}
		require.Equal(t, 5, n, "the new rows match the selection's query")

		path := "/api/v1/retries/selections/" + sel.ID + "/discard"
		q := "?count=" + strconv.Itoa(sel.Count) + "&hash=" + sel.Hash
		requireProblem(t, c.do("POST", path+q, viewer), http.StatusForbidden, "operator")
		requireProblem(t, c.do("POST", path+"?count=5&hash="+sel.Hash, op), http.StatusConflict, "nothing done")
		requireProblem(t, c.do("POST", path+"?count=3&hash="+retry.SelectionHash(nil), op), http.StatusConflict, "nothing done")
		requireProblem(t, c.do("POST", path+"?count=3", op), http.StatusBadRequest, "count and hash")
		assert.Equal(t, all, e.retryStates(), "a refused bulk action changes nothing")

		dr := c.do("POST", path+q, op)
		require.Equal(t, http.StatusOK, dr.code, dr.body)
		var res struct {
			Action               string
			Count, Done, Refused int
			Rows                 []struct{ ID int64 }
		}
		dr.json(t, &res)
		assert.Equal(t, "discard", res.Action)
		assert.Equal(t, 3, res.Done)
		assert.Equal(t, 0, res.Refused)
		after := e.retryStates()
		for id, s := range after {
			if slices.Contains(frozen, id) {
				assert.Equal(t, "discarded", s, "row %d was selected", id)
			} else {
				assert.Equal(t, "retryable", s, "row %d came after the selection: the discard must leave it", id)
			}
		}
		requireProblem(t, c.do("POST", path+q, op), http.StatusNotFound, "used")
		audit := e.ok("audit", "--kind", "Backup", "--name", "first").stdout
		assert.Contains(t, audit, "token:op")
		assert.Contains(t, audit, retry.ActionDiscard)
	})
}

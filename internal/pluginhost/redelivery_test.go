package pluginhost

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

// TestRedeliveryAfterRestartKeepsEveryUnackedItem pins DESIGN §7.2 at the
// plugin host: the process dies while a batch is on the wire, so the item
// that killed it, and any other whose ack had not come back, has no
// result. The restarted process must get every one of them again: each
// item ends with exactly one result, and it is Done. The item that
// crashed succeeds only on its second execution, so its Done proves it
// was delivered to the new process, not dropped or failed.
func TestRedeliveryAfterRestartKeepsEveryUnackedItem(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "test", "-names=example.com/test", "-state="+t.TempDir())
	h := newHost(t, &Config{Dir: dir, RestartBackoff: time.Millisecond})
	pid := currentPID(t, h, "example.com/test")

	items := names(40, func(i int) string { return "item" + strconv.Itoa(i) })
	const crash = 13
	items[crash] = "crash-once"
	// A window wider than the backup: a dropped item cannot block Send.
	got := run(t, h, "example.com/test", SessionOptions{BatchSize: 8, Window: 64}, items...)
	for i := range items {
		r, ok := got[uint64(i+1)]
		require.True(t, ok, "item %d (%s) got no result: dropped after the restart", i+1, items[i])
		require.Equal(t, plugin.OutcomeDone, r.Outcome, "item %d (%s): %s", i+1, items[i], r.Message)
	}
	require.NotEqual(t, pid, currentPID(t, h, "example.com/test"), "the crashed process was replaced")
}

package postgres

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStatsKeeperThreshold(t *testing.T) {
	k := newStatsKeeper()
	k.inserted("changes", 1000) // no plan depends on its statistics
	k.inserted("owner_edges", 49)
	assert.Empty(t, k.due())
	k.inserted("owner_edges", 1)
	assert.Equal(t, []string{"owner_edges"}, k.due(), "50 rows on an empty table")
	assert.Empty(t, k.due(), "the count starts again")
	// A table of 1M rows (another process loaded it) is due again after
	// 50 + 10 % of it, as autovacuum would analyze it.
	k.analyzed("owner_edges", 1_000_000)
	k.inserted("owner_edges", 100_000)
	assert.Empty(t, k.due())
	k.inserted("owner_edges", 50)
	assert.Equal(t, []string{"owner_edges"}, k.due())
	// Rows inserted by a statement (CollectBatch's INSERT ... SELECT)
	// count too.
	k.insertedBy(`INSERT INTO tombstones (uid, kind) SELECT r.uid, r.kind FROM resources r`, 40)
	k.insertedBy(`DELETE FROM tombstones WHERE uid = $1`, 40)
	k.insertedBy(`INSERT INTO changes (version) VALUES ($1)`, 40)
	assert.Empty(t, k.due())
	k.insertedBy(`INSERT INTO tombstones (uid) VALUES ($1)`, 10)
	assert.Equal(t, []string{"tombstones"}, k.due())
	var off *statsKeeper // autovacuum on: nothing counted
	off.inserted("owner_edges", 1_000_000)
	assert.Empty(t, off.due())
}

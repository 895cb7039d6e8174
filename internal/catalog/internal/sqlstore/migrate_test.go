package sqlstore

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadMigrations(t *testing.T) {
	ms, err := LoadMigrations(fstest.MapFS{
		"m/002_more.sql": {Data: []byte("B")},
		"m/001_init.sql": {Data: []byte("A")},
		"m/README":       {Data: []byte("ignored")},
	}, "m")
	require.NoError(t, err)
	require.Len(t, ms, 2)
	assert.Equal(t, Migration{Version: 1, Name: "init", SQL: "A"}, ms[0])
	assert.Equal(t, 2, ms[1].Version)

	for name, fsys := range map[string]fstest.MapFS{
		"gap":       {"m/001_a.sql": {}, "m/003_c.sql": {}},
		"duplicate": {"m/001_a.sql": {}, "m/001_b.sql": {}},
		"no number": {"m/init.sql": {}},
		"bad num":   {"m/x1_init.sql": {}},
	} {
		_, err := LoadMigrations(fsys, "m")
		assert.Error(t, err, name)
	}
}

func TestInsertSQL(t *testing.T) {
	assert.Equal(t, "INSERT INTO t (a, b) VALUES ($1, $2)", InsertSQL("t", []string{"a", "b"}))
}

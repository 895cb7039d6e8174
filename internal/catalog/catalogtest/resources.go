package catalogtest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testCRUD(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	in := res("Backup", "velero", "nightly", map[string]string{"app": "db"})
	in.Annotations = map[string]string{"a": "b"}
	in.Spec = json.RawMessage(`{"ttl":"720h"}`)
	in.Conditions = []catalog.Condition{{Type: "Ready", Status: "True", LastTransitionTime: Epoch}}
	in.Phase = catalog.PhaseDeleting // ignored: Create always starts Active
	got := f.create(t, in)
	require.NotEmpty(t, got.UID)
	assert.Equal(t, catalog.PhaseActive, got.Phase)
	assert.Nil(t, got.DeletionTimestamp)
	assert.Positive(t, got.ResourceVersion)
	assert.True(t, got.CreatedAt.Equal(Epoch))
	assert.Empty(t, in.UID, "Create must not modify its argument")

	byKey, err := f.s.Get(f.ctx, key("Backup", "velero", "nightly"))
	require.NoError(t, err)
	assert.Equal(t, got.UID, byKey.UID)
	assert.JSONEq(t, `{"ttl":"720h"}`, string(byKey.Spec))
	assert.Equal(t, map[string]string{"app": "db"}, byKey.Labels)
	assert.Equal(t, got.ResourceVersion, byKey.ResourceVersion)
	require.Len(t, byKey.Conditions, 1)
	assert.True(t, byKey.Conditions[0].LastTransitionTime.Equal(Epoch))

	byUID, err := f.s.GetByUID(f.ctx, got.UID)
	require.NoError(t, err)
	assert.Equal(t, byKey.Key(), byUID.Key())

	// Explicit UID is kept; the same key twice is refused.
	withUID := f.create(t, &catalog.Resource{Kind: "Backup", Name: "cluster-scoped", UID: "uid-1"})
	assert.Equal(t, "uid-1", withUID.UID)
	_, err = f.s.Create(f.ctx, res("Backup", "velero", "nightly", nil))
	require.ErrorIs(t, err, catalog.ErrAlreadyExists)
	_, err = f.s.Create(f.ctx, &catalog.Resource{Kind: "Backup", Name: "other", UID: "uid-1"})
	require.ErrorIs(t, err, catalog.ErrAlreadyExists)

	_, err = f.s.Get(f.ctx, key("Backup", "velero", "missing"))
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = f.s.GetByUID(f.ctx, "no-such-uid")
	require.ErrorIs(t, err, catalog.ErrNotFound)

	for name, bad := range map[string]*catalog.Resource{
		"no name":   {Kind: "Backup"},
		"no kind":   {Name: "x"},
		"bad spec":  {Kind: "Backup", Name: "x", Spec: json.RawMessage(`{`)},
		"bad ref":   {Kind: "Backup", Name: "x", References: []catalog.Reference{{Kind: "K", Name: "n", OnTargetDelete: "explode"}}},
		"owner uid": {Kind: "Backup", Name: "x", Owners: []catalog.OwnerRef{{Kind: "K", Name: "n"}}},
	} {
		_, err := f.s.Create(f.ctx, bad)
		require.ErrorIs(t, err, catalog.ErrInvalid, name)
	}
}

func testCreateBatch(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	v0, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	out, err := f.s.CreateBatch(f.ctx, []*catalog.Resource{res("K", "", "a", nil), res("K", "", "b", nil), res("K", "", "c", nil)})
	require.NoError(t, err)
	require.Len(t, out, 3)
	for i, r := range out {
		assert.Equal(t, v0+int64(i)+1, r.ResourceVersion)
	}
	// All or nothing: a duplicate in the batch leaves nothing behind.
	_, err = f.s.CreateBatch(f.ctx, []*catalog.Resource{res("K", "", "d", nil), res("K", "", "a", nil)})
	require.ErrorIs(t, err, catalog.ErrAlreadyExists)
	_, err = f.s.Get(f.ctx, key("K", "", "d"))
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = f.s.CreateBatch(f.ctx, []*catalog.Resource{res("K", "", "e", nil), res("K", "", "e", nil)})
	require.ErrorIs(t, err, catalog.ErrAlreadyExists)
	// The same in a batch big enough for a driver's bulk path (COPY).
	var big []*catalog.Resource
	for i := range 40 {
		big = append(big, res("K", "", fmt.Sprintf("big-%02d", i), nil))
	}
	big = append(big, res("K", "", "b", nil))
	_, err = f.s.CreateBatch(f.ctx, big)
	require.ErrorIs(t, err, catalog.ErrAlreadyExists)
	_, err = f.s.Get(f.ctx, key("K", "", "big-00"))
	require.ErrorIs(t, err, catalog.ErrNotFound)
	v1, err := f.s.CurrentVersion(f.ctx)
	require.NoError(t, err)
	assert.Equal(t, v0+3, v1)
}

func testUpdate(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	r := f.create(t, res("Backup", "ns", "b", map[string]string{"x": "1"}))
	f.clock.Advance(time.Minute)

	upd := *r
	upd.Labels = map[string]string{"x": "2"}
	upd.Finalizers = []string{"example.com/f"}
	upd.Status = json.RawMessage(`{"ok":true}`)
	upd.Phase = catalog.PhaseDeleting // ignored
	now := Epoch
	upd.DeletionTimestamp = &now // ignored
	got, err := f.s.Update(f.ctx, &upd)
	require.NoError(t, err)
	assert.Greater(t, got.ResourceVersion, r.ResourceVersion)
	assert.Equal(t, catalog.PhaseActive, got.Phase)
	assert.Nil(t, got.DeletionTimestamp)
	assert.Equal(t, "2", got.Labels["x"])
	assert.True(t, got.UpdatedAt.Equal(Epoch.Add(time.Minute)))
	assert.True(t, got.CreatedAt.Equal(Epoch))

	// The stale version conflicts, and changes nothing.
	stale := *r
	stale.Labels = map[string]string{"x": "stale"}
	_, err = f.s.Update(f.ctx, &stale)
	require.ErrorIs(t, err, catalog.ErrConflict)
	cur, err := f.s.Get(f.ctx, r.Key())
	require.NoError(t, err)
	assert.Equal(t, "2", cur.Labels["x"])
	assert.Equal(t, got.ResourceVersion, cur.ResourceVersion)

	// A different UID under the same key conflicts too.
	other := *cur
	other.UID = "someone-else"
	_, err = f.s.Update(f.ctx, &other)
	require.ErrorIs(t, err, catalog.ErrConflict)

	_, err = f.s.Update(f.ctx, res("Backup", "ns", "missing", nil))
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

func testList(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	var batch []*catalog.Resource
	for i := range 30 {
		tier := "gold"
		if i%3 == 0 {
			tier = "silver"
		}
		ns := "a"
		if i%2 == 0 {
			ns = "b"
		}
		batch = append(batch, res("Backup", ns, fmt.Sprintf("bk-%02d", i), map[string]string{"tier": tier, "i": fmt.Sprint(i)}))
	}
	batch = append(batch, res("Restore", "a", "r1", map[string]string{"tier": "gold"}))
	_, err := f.s.CreateBatch(f.ctx, batch)
	require.NoError(t, err)
	_, err = f.s.Schedule(catalog.WithActor(f.ctx, "t"), key("Backup", "a", "bk-01"), catalog.ScheduleOptions{Delay: time.Hour})
	require.NoError(t, err)

	names := func(rs []*catalog.Resource) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Namespace+"/"+r.Name)
		}
		return out
	}
	all, err := f.s.List(f.ctx, catalog.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, all.Items, 31)
	assert.Empty(t, all.Continue)

	kind, err := f.s.List(f.ctx, catalog.ListOptions{Kind: "Backup", Namespace: "a"})
	require.NoError(t, err)
	assert.Len(t, kind.Items, 15)
	assert.Equal(t, "a/bk-01", names(kind.Items)[0], "ordered by namespace and name")

	sched, err := f.s.List(f.ctx, catalog.ListOptions{Phase: catalog.PhaseScheduled})
	require.NoError(t, err)
	assert.Equal(t, []string{"a/bk-01"}, names(sched.Items))

	for sel, want := range map[string]int{
		"tier=silver":                10,
		"tier!=silver":               21,
		"tier in (gold)":             21,
		"tier=gold,i in (1,2,3,4,5)": 4,
		"!tier":                      0,
		"i":                          30,
	} {
		l, err := f.s.List(f.ctx, catalog.ListOptions{LabelSelector: sel})
		require.NoError(t, err, sel)
		assert.Len(t, l.Items, want, sel)
	}
	_, err = f.s.List(f.ctx, catalog.ListOptions{LabelSelector: "tier in (("})
	require.ErrorIs(t, err, catalog.ErrInvalid)
	_, err = f.s.List(f.ctx, catalog.ListOptions{Continue: "%%%not-a-token"})
	require.ErrorIs(t, err, catalog.ErrInvalid)

	// Pagination with a selector visits every match once, in order.
	var pages [][]string
	var seen []string
	opts := catalog.ListOptions{Kind: "Backup", LabelSelector: "tier=gold", Limit: 7}
	for {
		page, err := f.s.List(f.ctx, opts)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Items), 7)
		pages = append(pages, names(page.Items))
		seen = append(seen, names(page.Items)...)
		if page.Continue == "" {
			break
		}
		require.Len(t, page.Items, 7, "a page with a continue token is full")
		opts.Continue = page.Continue
		require.Less(t, len(pages), 10, "pagination does not end")
	}
	assert.Len(t, seen, 20)
	assert.IsIncreasing(t, seen)
	assert.Len(t, pages, 3)
}

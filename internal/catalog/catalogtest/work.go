package catalogtest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testLeases(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const q = "deletions"
	ttl := time.Minute
	w1, err := f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "a", Payload: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	assert.True(t, w1.RunAt.Equal(Epoch))
	again, err := f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "a", Payload: json.RawMessage(`{"n":2}`)})
	require.NoError(t, err)
	assert.Equal(t, w1.ID, again.ID, "Enqueue is idempotent per key")
	assert.JSONEq(t, `{"n":1}`, string(again.Payload))
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "b"})
	require.NoError(t, err)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "later", RunAt: Epoch.Add(time.Hour)})
	require.NoError(t, err)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "other", Key: "a"})
	require.NoError(t, err)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q})
	require.ErrorIs(t, err, catalog.ErrInvalid)

	// Claim takes due items only, oldest first, up to the limit.
	got, err := f.s.Claim(f.ctx, q, "h1", ttl, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "a", got[0].Key)
	assert.Equal(t, "h1", got[0].Holder)
	assert.True(t, got[0].LeaseExpiresAt.Equal(Epoch.Add(ttl)))
	assert.Equal(t, 1, got[0].Attempts)
	assert.Empty(t, got[0].TakenOverFrom, "a free item is not taken over")
	got2, err := f.s.Claim(f.ctx, q, "h2", ttl, 10)
	require.NoError(t, err)
	require.Len(t, got2, 1)
	assert.Equal(t, "b", got2[0].Key)
	none, err := f.s.Claim(f.ctx, q, "h3", ttl, 10)
	require.NoError(t, err)
	assert.Empty(t, none)

	// ClaimKey on a live lease says who holds it and until when.
	_, err = f.s.ClaimKey(f.ctx, q, "a", "h2", ttl)
	require.ErrorIs(t, err, catalog.ErrLeaseHeld)
	var held *catalog.LeaseHeldError
	require.ErrorAs(t, err, &held)
	assert.Equal(t, "h1", held.Holder)
	assert.True(t, held.ExpiresAt.Equal(Epoch.Add(ttl)))
	_, err = f.s.ClaimKey(f.ctx, q, "nope", "h2", ttl)
	require.ErrorIs(t, err, catalog.ErrNotFound)

	// Renew extends; a stranger cannot renew.
	f.clock.Advance(30 * time.Second)
	r, err := f.s.Renew(f.ctx, got[0].Fence(), ttl)
	require.NoError(t, err)
	assert.True(t, r.LeaseExpiresAt.Equal(Epoch.Add(30*time.Second+ttl)))
	stranger := got[0].Fence()
	stranger.Holder = "h2"
	_, err = f.s.Renew(f.ctx, stranger, ttl)
	require.ErrorIs(t, err, catalog.ErrLeaseLost)

	// After expiry the lease is taken over, and the old holder has lost it.
	f.clock.Advance(ttl + time.Second)
	taken, err := f.s.Claim(f.ctx, q, "h3", ttl, 10)
	require.NoError(t, err)
	require.Len(t, taken, 2, "both expired leases are taken over")
	assert.Equal(t, 2, taken[0].Attempts)
	assert.ElementsMatch(t, []string{"h1", "h2"}, []string{taken[0].TakenOverFrom, taken[1].TakenOverFrom},
		"a claim of an expired lease says whose it was")
	_, err = f.s.Renew(f.ctx, got[0].Fence(), ttl)
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	require.ErrorIs(t, f.s.Complete(f.ctx, got[0].Fence()), catalog.ErrLeaseLost)
	require.ErrorIs(t, f.s.Release(f.ctx, got[0].Fence(), time.Time{}, ""), catalog.ErrLeaseLost)

	// ClaimKey takes over an expired lease, ignoring RunAt.
	later, err := f.s.ClaimKey(f.ctx, q, "later", "h4", ttl)
	require.NoError(t, err)
	assert.Equal(t, "h4", later.Holder)
	re, err := f.s.ClaimKey(f.ctx, q, "later", "h4", ttl)
	require.NoError(t, err, "the holder may re-claim its own item")
	assert.Equal(t, later.Attempts, re.Attempts)
	assert.Equal(t, later.Epoch+1, re.Epoch, "a claim by the same holder is a new claim")
	assert.Empty(t, later.TakenOverFrom)
	assert.Empty(t, re.TakenOverFrom, "re-claiming one's own lease is no takeover")
	require.ErrorIs(t, f.s.Complete(f.ctx, later.Fence()), catalog.ErrLeaseLost, "the earlier claim is fenced off")

	require.NoError(t, f.s.Complete(f.ctx, taken[1].Fence()))
	require.NoError(t, f.s.Complete(f.ctx, re.Fence()))

	// Release sets the next run and the error; the item waits until then.
	require.NoError(t, f.s.Release(f.ctx, taken[0].Fence(), f.clock.Now().Add(time.Hour), "blocked: locked"))
	w, err := f.s.GetWork(f.ctx, q, taken[0].Key)
	require.NoError(t, err)
	assert.Empty(t, w.Holder)
	assert.Equal(t, "blocked: locked", w.LastError)
	assert.True(t, w.RunAt.Equal(f.clock.Now().Add(time.Hour)))
	none, err = f.s.Claim(f.ctx, q, "h5", ttl, 10)
	require.NoError(t, err)
	assert.Empty(t, none)
	f.clock.Advance(time.Hour)
	again2, err := f.s.Claim(f.ctx, q, "h5", ttl, 10)
	require.NoError(t, err)
	require.Len(t, again2, 1)
	assert.Equal(t, taken[0].Key, again2[0].Key)
	assert.Empty(t, again2[0].TakenOverFrom, "a released item is not taken over")

	// Complete removes the item.
	assert.Equal(t, taken[0].Epoch+1, again2[0].Epoch, "every claim increments the epoch")
	require.NoError(t, f.s.Complete(f.ctx, again2[0].Fence()))
	_, err = f.s.GetWork(f.ctx, q, again2[0].Key)
	require.ErrorIs(t, err, catalog.ErrNotFound)

	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "z", RunAt: Epoch})
	require.NoError(t, err)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "y", RunAt: Epoch.Add(time.Second)})
	require.NoError(t, err)
	items, err := f.s.ListWork(f.ctx, q)
	require.NoError(t, err)
	require.Len(t, items, 2)
	assert.Equal(t, "z", items[0].Key, "ordered by run time")
	others, err := f.s.ListWork(f.ctx, "other")
	require.NoError(t, err)
	assert.Len(t, others, 1)

	// ClaimKey of a lease another holder let expire says whose it was;
	// the same holder's own expired lease is no takeover.
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: q, Key: "k"})
	require.NoError(t, err)
	k1, err := f.s.ClaimKey(f.ctx, q, "k", "h6", ttl)
	require.NoError(t, err)
	assert.Empty(t, k1.TakenOverFrom)
	f.clock.Advance(ttl + time.Second)
	k2, err := f.s.ClaimKey(f.ctx, q, "k", "h7", ttl)
	require.NoError(t, err)
	assert.Equal(t, "h6", k2.TakenOverFrom)
	f.clock.Advance(ttl + time.Second)
	k3, err := f.s.ClaimKey(f.ctx, q, "k", "h7", ttl)
	require.NoError(t, err)
	assert.Empty(t, k3.TakenOverFrom)

	_, err = f.s.Claim(f.ctx, q, "h", 0, 1)
	require.ErrorIs(t, err, catalog.ErrInvalid)
}

func testConcurrentClaims(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	const n = 60
	for i := range n {
		_, err := f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "q", Key: fmt.Sprintf("k%03d", i)})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	claims := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("w%d", w)
			for {
				got, err := f.s.Claim(f.ctx, "q", holder, time.Hour, 3)
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, it := range got {
					if prev, dup := claims[it.Key]; dup {
						errs <- fmt.Errorf("%s claimed by %s and %s", it.Key, prev, holder)
					}
					claims[it.Key] = holder
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Len(t, claims, n)
}

func testCheckpoints(t *testing.T, newStore NewStoreFunc) {
	f := setup(t, newStore)
	_, _, err := f.s.LoadProgress(f.ctx, "bk")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = f.s.Enqueue(f.ctx, catalog.WorkItem{Queue: "deletions", Key: "bk"})
	require.NoError(t, err)
	mine, err := f.s.ClaimKey(f.ctx, "deletions", "bk", "me", time.Minute)
	require.NoError(t, err)
	fence := mine.Fence()

	cp := catalog.Checkpoint{
		Fence:    fence,
		Progress: catalog.DeletionProgress{UID: "bk", Digest: "sha256:x", Watermark: 100, TotalItems: 1000, Counts: map[string]catalog.OutcomeCount{"p": {Done: 97, Failed: 2, Blocked: 1}}},
		Upsert: []catalog.ItemOutcome{
			{Ordinal: 7, ItemKey: "pods/ns/a", Plugin: "p", Outcome: "failed", Message: "boom", Attempts: 1},
			{Ordinal: 3, ItemKey: "pods/ns/b", Plugin: "p", Outcome: "blocked", NextAttemptAt: Epoch.Add(time.Hour)},
			{Ordinal: 7, ItemKey: "pods/ns/a", Plugin: "q", Outcome: "failed"},
		},
	}
	require.NoError(t, f.s.SaveCheckpoint(f.ctx, cp))
	p, outs, err := f.s.LoadProgress(f.ctx, "bk")
	require.NoError(t, err)
	assert.Equal(t, int64(100), p.Watermark)
	assert.Equal(t, int64(2), p.Counts["p"].Failed)
	assert.True(t, p.UpdatedAt.Equal(Epoch))
	require.Len(t, outs, 3)
	assert.Equal(t, int64(3), outs[0].Ordinal, "ordered by ordinal, then plugin")
	assert.Equal(t, "bk", outs[0].UID)
	assert.True(t, outs[0].NextAttemptAt.Equal(Epoch.Add(time.Hour)))
	assert.Equal(t, "q", outs[2].Plugin)

	// Upsert replaces, Settle removes, in one write.
	require.NoError(t, f.s.SaveCheckpoint(f.ctx, catalog.Checkpoint{
		Fence:    fence,
		Progress: catalog.DeletionProgress{UID: "bk", Digest: "sha256:x", Watermark: 200, TotalItems: 1000},
		Upsert:   []catalog.ItemOutcome{{Ordinal: 7, Plugin: "p", Outcome: "blocked", Attempts: 2}},
		Settle:   []catalog.ItemOutcome{{Ordinal: 3, Plugin: "p"}, {Ordinal: 7, Plugin: "q"}},
	}))
	p, outs, err = f.s.LoadProgress(f.ctx, "bk")
	require.NoError(t, err)
	assert.Equal(t, int64(200), p.Watermark)
	require.Len(t, outs, 1)
	assert.Equal(t, "blocked", outs[0].Outcome)
	assert.Equal(t, 2, outs[0].Attempts)

	// Once the lease expires and another holder takes it, a fenced write
	// fails and changes nothing.
	f.clock.Advance(2 * time.Minute)
	err = f.s.SaveCheckpoint(f.ctx, catalog.Checkpoint{Fence: fence, Progress: catalog.DeletionProgress{UID: "bk", Watermark: 999},
		Settle: []catalog.ItemOutcome{{Ordinal: 7, Plugin: "p"}}})
	require.ErrorIs(t, err, catalog.ErrLeaseLost, "an expired lease is not held")
	_, err = f.s.ClaimKey(f.ctx, "deletions", "bk", "you", time.Minute)
	require.NoError(t, err)
	err = f.s.SaveCheckpoint(f.ctx, catalog.Checkpoint{Fence: fence, Progress: catalog.DeletionProgress{UID: "bk", Watermark: 999}})
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	p, outs, err = f.s.LoadProgress(f.ctx, "bk")
	require.NoError(t, err)
	assert.Equal(t, int64(200), p.Watermark)
	assert.Len(t, outs, 1)

	// Unfenced writes need no lease.
	require.NoError(t, f.s.SaveCheckpoint(f.ctx, catalog.Checkpoint{Progress: catalog.DeletionProgress{UID: "other", Watermark: 1}}))
	require.ErrorIs(t, f.s.SaveCheckpoint(f.ctx, catalog.Checkpoint{}), catalog.ErrInvalid)

	require.NoError(t, f.s.DeleteProgress(f.ctx, "bk"))
	_, _, err = f.s.LoadProgress(f.ctx, "bk")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	require.NoError(t, f.s.DeleteProgress(f.ctx, "bk"), "deleting twice is fine")
}

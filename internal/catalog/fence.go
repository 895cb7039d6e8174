package catalog

import "context"

type fenceKey struct{}

// WithFence makes every resource write done with the returned context
// (Update, the lifecycle methods, RemoveFinalizer, Purge) and every
// checkpoint without a Fence of its own conditional on f: the write
// fails with ErrLeaseLost, in its own transaction and changing nothing,
// unless f's claim is still live. A deletion runs under the fence of its
// work item, so a run that lost its lease writes nothing more.
func WithFence(ctx context.Context, f *Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceFrom returns the fence set by WithFence, or nil.
func FenceFrom(ctx context.Context) *Fence {
	f, _ := ctx.Value(fenceKey{}).(*Fence)
	return f
}

// LeaderFence names one term of a leader lease (see Leadership): the
// fencing token of the singleton loops that only the leader runs.
type LeaderFence struct {
	Name   string // the lease's name
	Holder string
	Term   int64
}

type leaderFenceKey struct{}

// WithLeaderFence makes every write of the Store done with the returned
// context conditional on f's term: the write fails with a
// *StaleTermError (errors.Is ErrStaleTerm), in its own transaction and
// changing nothing, unless f.Holder still holds lease f.Name in term
// f.Term and the lease is live. The check locks the lease row against a
// takeover until the write commits. The elector gives the leader's loops
// a context fenced by its term, so a leader that was paused past its
// lease writes nothing once another replica has taken over, whatever it
// believes. Leadership's own methods are never fenced.
func WithLeaderFence(ctx context.Context, f *LeaderFence) context.Context {
	return context.WithValue(ctx, leaderFenceKey{}, f)
}

// LeaderFenceFrom returns the fence set by WithLeaderFence, or nil.
func LeaderFenceFrom(ctx context.Context) *LeaderFence {
	f, _ := ctx.Value(leaderFenceKey{}).(*LeaderFence)
	return f
}

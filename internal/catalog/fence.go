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

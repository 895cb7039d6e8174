package deletion

import "time"

// TestHooks step the pipeline from a test (see testHooks).
type TestHooks struct {
	// RenewTick replaces the lease renewal timer.
	RenewTick <-chan time.Time
	// Settled is called, on the settler's goroutine, after it took an item.
	Settled func(ordinal int64)
	// FeederWaits is called when the window holds the feeder back.
	FeederWaits func(ordinal, watermark int64)
	// BeforePurgeKey is called before each storage key a purge deletes.
	BeforePurgeKey func(key string)
}

// SetTestHooks installs h on d; call it before d runs anything.
func SetTestHooks(d *Deleter, h TestHooks) {
	d.hooks = testHooks{renewTick: h.RenewTick, settled: h.Settled, feederWaits: h.FeederWaits, beforePurgeKey: h.BeforePurgeKey}
}

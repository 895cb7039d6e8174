// Package catalogtest is the conformance suite every catalog driver runs
// (Run), plus the schema, cross-process and benchmark harnesses the driver
// tests share. It drives a Store only through catalog.Store.
package catalogtest

import (
	"sync"
	"time"
)

// Clock is a settable clock for Config.Now.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

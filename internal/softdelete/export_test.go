package softdelete

import "time"

// SetTestSignals makes the loop tell sleeping how long it is about to
// sleep, and end each sleep only when wake delivers; call it before Run.
func SetTestSignals(t *Timers, sleeping func(time.Duration), wake <-chan time.Time) {
	t.hooks = testHooks{sleeping: sleeping, wake: wake}
}

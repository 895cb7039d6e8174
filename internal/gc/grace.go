package gc

import (
	"context"
	"errors"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
)

// AnnotationCascadeForce marks a resource whose deletion was requested
// with --force (and everything its cascade moved to Deleting): the
// cascade skips the grace windows (lethe.io/deletion-delay) of what it
// reaches, each skip audited as a force-delete.
const AnnotationCascadeForce = "lethe.io/cascade-force"

// ReasonGraceWindow is the DeletionStuck reason of a resource that waits
// (Foreground) for a dependent or a cascade referrer in its own grace
// window: it can still be undeleted, until the window ends.
const ReasonGraceWindow = "WaitingForGraceWindow"

func forced(r *catalog.Resource) bool { return r.Annotations[AnnotationCascadeForce] == "true" }

// graceOf returns the grace window d keeps when a cascade that is not
// forced reaches it: its lethe.io/deletion-delay, when positive and valid.
// A delay that does not parse keeps nothing from being deleted (it was
// refused when the resource was applied).
func graceOf(d *catalog.Resource) time.Duration {
	v, ok := d.Annotations[catalog.AnnotationDeletionDelay]
	if !ok {
		return 0
	}
	delay, err := time.ParseDuration(v)
	if err != nil || delay <= 0 {
		return 0
	}
	return delay
}

// inGrace says whether d, reached by r's cascade, keeps a grace window
// now: it is Scheduled and its window has not ended, or Active with a
// delay; never under a forced cascade.
func (c *Collector) inGrace(r, d *catalog.Resource) bool {
	if forced(r) {
		return false
	}
	if d.Phase == catalog.PhaseScheduled {
		return d.DeletionDueAt != nil && d.DeletionDueAt.After(c.now())
	}
	return d.Phase == catalog.PhaseActive && graceOf(d) > 0
}

// scheduleInCascade moves d, reached by parent's cascade, to Scheduled
// for its own grace window (when it is not Scheduled already), keeping
// the propagation it will be deleted with and the cascade's root. It
// returns d as it is now.
func (c *Collector) scheduleInCascade(ctx context.Context, parent, d *catalog.Resource, prop Propagation, reason string) (*catalog.Resource, error) {
	if d.Phase == catalog.PhaseScheduled {
		return d, nil
	}
	nd, err := c.st.Schedule(c.actor(ctx), d.Key(), catalog.ScheduleOptions{Delay: graceOf(d), Propagation: catalog.Propagation(prop), Root: rootOf(parent),
		Reason: reason + "; its own grace window (" + catalog.AnnotationDeletionDelay + "=" + d.Annotations[catalog.AnnotationDeletionDelay] + ")"})
	if errors.Is(err, catalog.ErrInvalidTransition) {
		return d, nil // moved on meanwhile; its next event wakes us
	}
	return nd, err
}

// markForced gives d the cascade-force annotation before a forced cascade
// moves it to Deleting, so that its own cascade skips the windows too.
func (c *Collector) markForced(ctx context.Context, d *catalog.Resource) (*catalog.Resource, error) {
	if forced(d) {
		return d, nil
	}
	x := *d
	x.Annotations = map[string]string{}
	for k, v := range d.Annotations {
		x.Annotations[k] = v
	}
	x.Annotations[AnnotationCascadeForce] = "true"
	nd, err := c.st.Update(c.actor(ctx), &x)
	if errors.Is(err, catalog.ErrConflict) {
		return d, nil // changed meanwhile: the enter that follows fails the same way
	}
	return nd, err
}

// Package gc is the garbage collector: it carries deletions along owner
// and reference edges (DESIGN §6). A resource that enters Deleting is
// collected here: its dependents are deleted, orphaned or unlinked by its
// propagation policy (Foreground, Background, Orphan, after Kubernetes),
// its referrers are handled by their onTargetDelete policy (block, unset,
// cascade, allowDangling, after Goten), the DeleteItemAction plugins that
// select it run on it as one item, and it is purged once nothing holds it.
// What waits on something that is not itself being deleted gets a
// DeletionStuck condition naming the chain of blockers; Explain prints the
// same chain as a tree.
//
// Work is claimed per resource with a lease on the catalog's work queue
// (queue "gc", key = UID) and every write runs under the claim's fence,
// so a `lethe delete --wait` process and a `lethe server` can both drive
// the collector, and either can stop at any moment.
//
// The package stands on the catalog's role interfaces and on the plugin
// host; it does not know the CLI, a driver, or backup tarballs (backups
// take part in the graph, but their own items and purge belong to
// internal/deletion).
package gc

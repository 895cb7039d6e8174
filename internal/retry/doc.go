// Package retry is the retry queue for everything whose deletion cannot
// finish yet (DESIGN §6), after IaSQL's asynchronous deletion, River's
// job states and Sidekiq's dead set:
//
//   - a backup item at a plugin (KindBackupItem; internal/deletion
//     records them after each run);
//   - a catalog resource at a plugin (KindResource);
//   - a resource waiting on a block reference or a finalizer (KindWait).
//
// A row (catalog.RetryRow) holds kind, key (the owner's catalog key),
// item id, plugin, state (catalog.RetryRetryable, RetryRunning,
// RetryDiscarded), next attempt, attempts, last error, a JSON history of
// (time, outcome, message, duration), and when it was first seen.
//
// The API, for engines (it imports neither internal/gc nor
// internal/deletion):
//
//	q, _ := retry.New(&retry.Config{Store: st, Policy: p, Webhooks: urls})
//	q.Record(ctx, retry.Outcome{Kind: retry.KindWait, Owner: key, UID: uid,
//	    ItemID: "reference:Kind/ns/name", Result: "waiting", Message: "…"})
//	q.Record(ctx, retry.Outcome{Kind: retry.KindResource, Owner: key, UID: uid,
//	    Plugin: "example.com/x", Result: "blocked", RetryAfter: time.Hour})
//	q.Succeed(ctx, key, uid, ids) // those items are done (nil ids: all of the owner)
//	q.Finish(ctx, key, uid, abandoned) // the owner was purged
//	q.List / q.Get / q.RetryNow / q.Discard // operator controls, audited
//
// Record computes the next attempt from the plugin's Backoff (polynomial
// with jitter, never earlier than the plugin's retryAfter; see Backoff).
// A row that reaches its plugin's maximum attempts is discarded in the
// same transaction that writes the event (an audit entry) and one
// outbox notification per webhook; then its owner gets the
// DeletionStuck condition. Nothing is ever purged here: the deletion
// stays until it finishes or an operator abandons it.
//
// A Collector claims due rows with leases (FOR UPDATE SKIP LOCKED on
// PostgreSQL, so each row runs in one place) and hands them, grouped by
// owner, to the Handler registered for their kind; its timer wakes at
// the next due time from an index. A Notifier delivers the outbox to the
// webhooks configured now (a row names its target without credentials;
// any other target is refused), with a body it encodes from the row's
// event, signed per Standard Webhooks with each webhook's own secret,
// never following a redirect, with timeouts and backoff: at least once.
//
// The package owns the queue's policy and its events; it must not touch
// a resource beyond its DeletionStuck condition, and never purges.
package retry

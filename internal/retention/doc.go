// Package retention decides which backups a RetentionPolicy keeps and
// which it deletes (DESIGN §13). It is pure: it takes backups (name,
// creation time, phase, labels), a policy and the current time, and
// returns a plan with a reason for every decision. It reads no catalog,
// writes nothing and starts nothing; the CLI and the server feed it and
// carry out its plan through the normal deletion pipeline.
//
// The keep rules are restic's `forget` rules, with restic's semantics
// (internal/data/snapshot_policy.go in restic): Forget is the one
// function that applies them to one group. Evaluate adds what restic
// does not have: selection, grouping by labels, phases, the guards
// (minSuccessful, maxDeletesPerRun, the lethe.io/retain hold,
// failedRetention) and, through Combine, overlapping policies.
package retention

// Package plugintest tests Lethe DeleteItemAction plugins.
//
// It offers plugin authors three things:
//
//   - Harness (and Run): an in-process harness that calls AppliesTo, filters
//     items through the compiled selector the way the host does, and runs
//     Execute concurrently, returning each item's classified Result. No
//     process, no gRPC.
//   - Serve: the plugin's real gRPC server, in memory (grpc bufconn), with a
//     Conn that speaks the protocol like the host does (ListPlugins,
//     AppliesTo, the Execute stream with batches, ids and cancellation).
//   - Conformance: a check of a built plugin binary, started through
//     hashicorp/go-plugin exactly as the host starts it: handshake,
//     ListPlugins, AppliesTo, Execute on sample items including a cancelled
//     one, and graceful shutdown with no process left behind.
//
// Like pkg/plugin it is public API: it imports only pkg/plugin, the
// generated protocol package, go-plugin and gRPC; never Lethe's internal
// packages, a database driver or the CLI.
package plugintest

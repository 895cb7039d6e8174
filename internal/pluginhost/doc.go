// Package pluginhost finds, starts and runs DeleteItemAction plugins out of
// process, over hashicorp/go-plugin and gRPC.
//
// It owns the plugin processes: discovery (every executable of the plugin
// directory, handshaken concurrently), trust (a minimal environment per
// plugin, lock file checksums checked on a sealed copy that is what runs,
// sshd's ownership rule, pinned mTLS, an optional plugin user; see
// docs/security.md), restarts with backoff, redelivery after a crash,
// per-item timeouts, process-group kills and log forwarding. A binary it
// refuses or cannot start is a Problem (Host.Problems), not a failure of
// the whole host; items in flight when a process dies are retried one at a
// time, so that only the item that kills it fails. The deletion
// pipeline talks to it through Host, Session and the types of api.go; it
// never sees gRPC. This package must not touch the catalog or the archive.
package pluginhost

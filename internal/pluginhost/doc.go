// Package pluginhost finds, starts and runs DeleteItemAction plugins out of
// process, over hashicorp/go-plugin and gRPC.
//
// It owns the plugin processes: discovery (every executable of the plugin
// directory, handshaken concurrently), trust (lock file checksums, AutoMTLS,
// file permissions), restarts with backoff, redelivery after a crash,
// per-item timeouts, process-group kills and log forwarding. The deletion
// pipeline talks to it through Host, Session and the types of api.go; it
// never sees gRPC. This package must not touch the catalog or the archive.
package pluginhost

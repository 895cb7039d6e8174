// Package plugin is Lethe's public SDK for DeleteItemAction plugins.
//
// A DeleteItemAction cleans up what one item of a backup created outside the
// backup: a cloud snapshot, an object-store copy, a DNS record. Lethe runs it
// out of process, over hashicorp/go-plugin and gRPC, when the backup is
// deleted. A plugin's main is a few lines:
//
//	func main() {
//		plugin.Serve(&plugin.Plugin{
//			Name:    "example.com/ebs-snapshots",
//			Version: "v1.2.0",
//			Action:  &snapshots{},
//		})
//	}
//
// Execute sees one item at a time; the SDK hides the stream and the batching,
// and calls Execute concurrently up to Plugin.MaxConcurrency. Execute returns
// nil when the item is done, Blocked when it cannot be deleted yet, Skipped
// when the plugin chooses not to act, and any other error when it failed.
// Delivery is at least once: Execute must be idempotent.
//
// This package is the only API third parties import. It must not import
// Lethe's internal packages, a database driver or the CLI.
package plugin

// Package catalog owns Lethe's data model and the interface every engine
// stands on: resources and their lifecycle (Active → Scheduled → Deleting →
// Purged), owner and reference edges, leases on work items, the change feed,
// deletion progress and the append-only audit log.
//
// Drivers (sqlite, postgres) implement Store and map their database errors to
// the sentinels here, so no caller ever sees a driver type. This package must
// not import a driver; drivers.Open picks one by URL.
package catalog

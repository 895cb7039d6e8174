// Package cli is Lethe's command line: cobra commands, flag and environment
// handling, output formats and the wiring of the catalog, storage and plugin
// host for each command. Commands return errors; only Main turns them into
// an exit code.
package cli

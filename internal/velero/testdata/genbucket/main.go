// Command genbucket writes the fixture bucket laid out as Velero 1.18 lays
// out a backup storage location (see velerotest.Bucket) into
// internal/velero/testdata/bucket-1.18. Run it from the repository root:
//
//	go run ./internal/velero/testdata/genbucket
//
// The tests check that the committed files are what it writes.
//
// With -in-progress NAME it also writes a backup NAME that Velero is
// still writing: its velero-backup.json says phase InProgress.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/internal/velero/velerotest"
)

func main() {
	out := flag.String("out", "internal/velero/testdata/bucket-1.18", "folder to write the bucket into (replaced)")
	inProgress := flag.String("in-progress", "", "also write a backup of this name that Velero is still writing (phase InProgress)")
	flag.Parse()
	if err := os.RemoveAll(*out); err != nil {
		fmt.Fprintln(os.Stderr, "genbucket:", err)
		os.Exit(1)
	}
	files := velerotest.Bucket()
	if *inProgress != "" {
		for k, v := range velerotest.Backup(*inProgress) {
			files[k] = v
		}
		obj := velerotest.BackupObject(*inProgress)
		obj["status"].(map[string]any)["phase"] = "InProgress"
		delete(obj["status"].(map[string]any), "completionTimestamp")
		meta, err := json.Marshal(obj)
		if err != nil {
			fmt.Fprintln(os.Stderr, "genbucket:", err)
			os.Exit(1)
		}
		files[velero.MetadataKey(*inProgress)] = meta
	}
	if err := velerotest.WriteDir(*out, files); err != nil {
		fmt.Fprintln(os.Stderr, "genbucket:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", *out)
}

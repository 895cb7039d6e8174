// Command genbucket writes the fixture bucket laid out as Velero 1.18 lays
// out a backup storage location (see velerotest.Bucket) into
// internal/velero/testdata/bucket-1.18. Run it from the repository root:
//
//	go run ./internal/velero/testdata/genbucket
//
// The tests check that the committed files are what it writes.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/lethehq/lethe/internal/velero/velerotest"
)

func main() {
	out := flag.String("out", "internal/velero/testdata/bucket-1.18", "folder to write the bucket into (replaced)")
	flag.Parse()
	if err := os.RemoveAll(*out); err != nil {
		fmt.Fprintln(os.Stderr, "genbucket:", err)
		os.Exit(1)
	}
	if err := velerotest.WriteDir(*out, velerotest.Bucket()); err != nil {
		fmt.Fprintln(os.Stderr, "genbucket:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", *out)
}

package archive_test

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/lethehq/lethe/internal/archive"
)

// FuzzReader feeds arbitrary bytes to the reader. It must never panic or
// hang; errors are fine. When Validate accepts a tarball, reading it must
// yield exactly Summary.Items distinct items with ordinals 0…n-1.
func FuzzReader(f *testing.F) {
	for _, fx := range allFixtures() {
		data, err := os.ReadFile(fx.path())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	// Small caps keep each run fast: coverage instrumentation makes
	// decompression slow, and the bomb seeds expand to megabytes.
	lim := archive.Limits{MaxEntrySize: 256 << 10, MaxTotalSize: 2 << 20, MaxEntries: 10_000, MaxPendingSize: 256 << 10}
	f.Fuzz(func(t *testing.T, data []byte) {
		sum, err := archive.Validate(bytes.NewReader(data), lim)
		if err != nil {
			return
		}
		rd, err := archive.NewReader(bytes.NewReader(data), lim)
		if err != nil {
			t.Fatalf("Validate accepted what NewReader refuses: %v", err)
		}
		seen := map[string]bool{}
		var n int64
		for {
			it, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("Validate accepted what Next refuses: %v", err)
			}
			if it.Ordinal != n {
				t.Fatalf("ordinal %d, want %d", it.Ordinal, n)
			}
			if seen[it.Key()] {
				t.Fatalf("item %s yielded twice", it.Key())
			}
			seen[it.Key()] = true
			n++
		}
		if n != sum.Items || rd.Digest() != sum.Digest {
			t.Fatalf("read %d items (digest %s), Validate said %d (%s)", n, rd.Digest(), sum.Items, sum.Digest)
		}
	})
}

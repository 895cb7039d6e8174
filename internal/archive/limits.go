package archive

import (
	"cmp"
	"fmt"
)

// Defaults for Limits. Kubernetes caps an object at about 1.5 MiB in etcd,
// and Velero's JSON compresses about 5-20x (tar headers included), so these
// leave a wide margin for real backups while bounding hostile ones.
const (
	DefaultMaxEntrySize   = 16 << 20 // bytes in one entry
	DefaultMaxTotalSize   = 64 << 30 // decompressed bytes in the whole stream
	DefaultMaxEntries     = 10_000_000
	DefaultMaxRatio       = 500      // decompressed / compressed bytes
	DefaultMaxPendingSize = 64 << 20 // see Limits.MaxPendingSize

	// ratioFloor is the decompressed size below which the ratio cap is not
	// checked, so that tiny, very regular tarballs are not flagged. A stream
	// can only reach 500x over a mebibyte if it is mostly runs of one byte.
	ratioFloor = 1 << 20
)

// Limits bound what a Reader accepts. A zero field takes its default.
type Limits struct {
	// MaxEntrySize caps the size of any one tar entry (items and ignored
	// files alike).
	MaxEntrySize int64
	// MaxTotalSize caps the decompressed size of the whole stream.
	MaxTotalSize int64
	// MaxEntries caps the number of tar entries, directories included.
	MaxEntries int64
	// MaxRatio caps decompressed/compressed bytes, checked continuously once
	// a mebibyte has been decompressed. gzip bombs run at ~1000x, zstd ones
	// far higher; real backups stay well under 100x.
	MaxRatio float64
	// MaxPendingSize caps the bytes of versioned copies held in memory while
	// waiting to see whether their unversioned item follows. Velero writes
	// the unversioned item first, so its tarballs need none of this.
	MaxPendingSize int64
}

func (l Limits) withDefaults() (Limits, error) {
	l.MaxEntrySize = cmp.Or(l.MaxEntrySize, DefaultMaxEntrySize)
	l.MaxTotalSize = cmp.Or(l.MaxTotalSize, DefaultMaxTotalSize)
	l.MaxEntries = cmp.Or(l.MaxEntries, DefaultMaxEntries)
	l.MaxRatio = cmp.Or(l.MaxRatio, DefaultMaxRatio)
	l.MaxPendingSize = cmp.Or(l.MaxPendingSize, DefaultMaxPendingSize)
	if l.MaxEntrySize < 0 || l.MaxTotalSize < 0 || l.MaxEntries < 0 || l.MaxRatio < 1 || l.MaxPendingSize < 0 {
		return l, fmt.Errorf("archive: invalid limits %+v: caps must be positive and the ratio at least 1", l)
	}
	return l, nil
}

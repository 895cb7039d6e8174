package faults

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Expect is what a fault run should have left behind.
type Expect struct {
	// Backups were all due for purging: each is purged exactly once.
	Backups []string
	// Items is how many items each backup's tarball holds; every one
	// must have reached every plugin of Plugins.
	Items   map[string]int
	Plugins []string
	// Dependents maps a backup to the names of the VolumeSnapshots it
	// owns with blockOwnerDeletion: each is purged, and before its owner.
	Dependents map[string][]string
	// StorageDir, when set, is where the file storage (or versitygw's
	// posix bucket) keeps backups/<name>/: nothing of a purged backup may
	// remain there.
	StorageDir string
	// Record is the fleetrec plugin's log (internal/e2e/testdata/fleetrec).
	Record string
	// AuditSkew is how much earlier than the entry before it an audit
	// entry of one backup may be dated. Zero: none. The fault tests
	// tolerate none: a write is dated once it holds the catalog's write
	// lock (docs/faults.md, "Found and fixed").
	AuditSkew time.Duration
}

// Report is what Check read and what it found broken.
type Report struct {
	Violations []string
	// PurgedAt is each purged backup's tombstone time (UTC nanoseconds).
	PurgedAt map[string]int64
	// MaxAuditSkew is the most an audit entry was dated before the entry
	// before it (of the same backup).
	MaxAuditSkew time.Duration
	// Crashes counts the record's C lines (a plugin process that exited
	// on purpose, internal/e2e/testdata/fleetrec's crash mode).
	Crashes int
}

func (r *Report) fail(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// Check verifies, independently of Lethe's engines, from the catalog's
// tables (raw SQL on db, SQLite or PostgreSQL), the storage and the
// plugin record:
//   - every expected backup is gone from resources, has one tombstone and
//     exactly one purge in the audit log, the last of its entries, whose
//     times never go backwards;
//   - every item of every backup reached every plugin (an E line), and no
//     item's plugin call was left unfinished (an S with no E after it);
//   - every dependent is purged, and not after its owner (no block
//     reference bypassed);
//   - nothing of a purged backup is left in the storage.
func Check(ctx context.Context, db *sql.DB, want Expect) (*Report, error) {
	r := &Report{PurgedAt: map[string]int64{}}
	for _, name := range want.Backups {
		var live int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM resources WHERE kind = 'Backup' AND name = $1`, name).Scan(&live); err != nil {
			return nil, err
		}
		if live != 0 {
			r.fail("backup %s is still in the catalog", name)
		}
		at, uid, err := tombstone(ctx, db, "Backup", name)
		if err != nil {
			return nil, err
		}
		if uid == "" {
			r.fail("backup %s has no tombstone", name)
			continue
		}
		r.PurgedAt[name] = at
		if err := checkAudit(ctx, db, r, name, uid, want.AuditSkew); err != nil {
			return nil, err
		}
		var deps map[string][]purged
		if len(want.Dependents[name]) > 0 {
			if deps, err = tombstonesOf(ctx, db, "VolumeSnapshot"); err != nil {
				return nil, err
			}
		}
		for _, dep := range want.Dependents[name] {
			var dat int64
			var duid string
			switch ts := deps[dep]; len(ts) {
			case 0:
			case 1:
				dat, duid = ts[0].at, ts[0].uid
			default:
				return nil, fmt.Errorf("VolumeSnapshot %s has %d tombstones: one name, several uids (the test reuses no name)", dep, len(ts))
			}
			switch {
			case duid == "":
				r.fail("dependent %s of backup %s was not purged", dep, name)
			case dat > at:
				r.fail("dependent %s was purged after its owner %s: a blockOwnerDeletion reference was bypassed", dep, name)
			}
		}
		if want.StorageDir != "" {
			dir := filepath.Join(want.StorageDir, "backups", name)
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				r.fail("backup %s is purged but %s is still in the storage (%v)", name, dir, err)
			}
		}
	}
	if want.Record != "" {
		if err := checkRecord(r, want); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// purged is one tombstone: when, and the uid it was.
type purged struct {
	at  int64
	uid string
}

// tombstonesOf reads every tombstone of kind at once, by name (a
// cascade's 100,000 dependents are one query, not one each).
func tombstonesOf(ctx context.Context, db *sql.DB, kind string) (map[string][]purged, error) {
	rows, err := db.QueryContext(ctx, `SELECT name, uid, purged_at FROM tombstones WHERE kind = $1`, kind)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]purged{}
	for rows.Next() {
		var name string
		var p purged
		if err := rows.Scan(&name, &p.uid, &p.at); err != nil {
			return nil, err
		}
		out[name] = append(out[name], p)
	}
	return out, rows.Err()
}

func tombstone(ctx context.Context, db *sql.DB, kind, name string) (int64, string, error) {
	rows, err := db.QueryContext(ctx, `SELECT uid, purged_at FROM tombstones WHERE kind = $1 AND name = $2`, kind, name)
	if err != nil {
		return 0, "", err
	}
	defer rows.Close()
	var uid string
	var at int64
	n := 0
	for rows.Next() {
		if err := rows.Scan(&uid, &at); err != nil {
			return 0, "", err
		}
		n++
	}
	if n > 1 {
		return 0, "", fmt.Errorf("%s %s has %d tombstones: one name, several uids (the test reuses no name)", kind, name, n)
	}
	return at, uid, rows.Err()
}

func checkAudit(ctx context.Context, db *sql.DB, r *Report, name, uid string, skew time.Duration) error {
	rows, err := db.QueryContext(ctx, `SELECT id, ts, action, actor FROM audit WHERE uid = $1 ORDER BY id`, uid)
	if err != nil {
		return err
	}
	defer rows.Close()
	var actions []string
	var lastTS, lastID int64
	var lastActor, lastAction string
	purges := 0
	for rows.Next() {
		var id, ts int64
		var action, actor string
		if err := rows.Scan(&id, &ts, &action, &actor); err != nil {
			return err
		}
		if ts < lastTS {
			r.MaxAuditSkew = max(r.MaxAuditSkew, time.Duration(lastTS-ts))
		}
		if ts < lastTS-int64(skew) {
			r.fail("backup %s: audit entry %d (%s by %s) is dated before the entry before it (%d, %s by %s), by %s", name, id, action, actor,
				lastID, lastAction, lastActor, time.Duration(lastTS-ts))
		}
		lastTS, lastID, lastActor, lastAction = ts, id, actor, action
		if strings.Contains(action, "purge") {
			purges++
		}
		actions = append(actions, action)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	switch {
	case purges != 1:
		r.fail("backup %s: %d purges in the audit log, want exactly 1: %v", name, purges, actions)
	case !strings.Contains(actions[len(actions)-1], "purge"):
		r.fail("backup %s: the audit log goes on after its purge: %v", name, actions)
	case len(actions) < 2:
		r.fail("backup %s: the audit log has its purge only, not what led to it: %v", name, actions)
	}
	return nil
}

// checkRecord reads fleetrec's lines: S, E or C, backup, plugin, item,
// lethe pid.
func checkRecord(r *Report, want Expect) error {
	f, err := os.Open(want.Record)
	if err != nil {
		return err
	}
	defer f.Close()
	type key struct{ backup, plugin, item string }
	open := map[key]int{}        // S lines not yet followed by an E
	done := map[key]bool{}       // an E line was seen
	items := map[[2]string]int{} // backup, plugin → distinct items done
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 5 {
			return fmt.Errorf("record line %d: %q", n, sc.Text())
		}
		k := key{fields[1], fields[2], fields[3]}
		switch fields[0] {
		case "S":
			open[k]++
		case "E":
			if open[k] > 0 {
				open[k]--
			}
			if !done[k] {
				done[k] = true
				items[[2]string{k.backup, k.plugin}]++
			}
		case "C":
			r.Crashes++
			if open[k] > 0 {
				open[k]-- // the crashed call ends here; its redelivery starts anew
			}
		default:
			return fmt.Errorf("record line %d: %q", n, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for _, b := range want.Backups {
		for _, p := range want.Plugins {
			if got := items[[2]string{b, p}]; got != want.Items[b] {
				r.fail("backup %s: %d of its %d items reached plugin %s", b, got, want.Items[b], p)
			}
		}
	}
	var unfinished []string
	for k, n := range open {
		if n > 0 && !done[k] {
			unfinished = append(unfinished, k.backup+" "+k.plugin+" "+k.item)
		}
	}
	sort.Strings(unfinished)
	for _, u := range unfinished {
		r.fail("a plugin call started and never finished: %s", u)
	}
	return nil
}

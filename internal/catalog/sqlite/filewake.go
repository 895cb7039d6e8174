package sqlite

import (
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/lethehq/lethe/internal/catalog/internal/sqlstore"
)

// fileWake wakes this process's change-feed listeners when another
// process commits to the same database file (Config.FileWake). SQLite
// writes a commit to the write-ahead log (path-wal), and a checkpoint to
// the database file: the folder holding both is watched, since the log
// may be created or removed while it is open. A wake-up only says "look
// again": the listeners re-read the change table, and keep a slow poll
// for what the operating system does not report (a network filesystem).
//
// A commit's last write to the log comes just before the writer publishes
// it in the shared-memory index (path-shm, written through a mapping, which
// reports nothing): a reader woken by that write may look too early and
// find nothing new. So each wake-up is followed by two more, trailWake and
// then trailWake2 later, once the file has been quiet.
type fileWake struct {
	once sync.Once
	w    *fsnotify.Watcher // nil: not started, or the file cannot be watched
	done chan struct{}
}

// start watches path's folder and signals bc on each write of path or of
// its log. It reports whether the watch runs; it starts once.
func (f *fileWake) start(path string, bc *sqlstore.Broadcast, fail func(error)) bool {
	f.once.Do(func() {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			fail(err)
			return
		}
		abs, err := filepath.Abs(path)
		if err == nil {
			err = w.Add(filepath.Dir(abs))
		}
		if err != nil {
			_ = w.Close()
			fail(err)
			return
		}
		names := map[string]bool{abs: true, abs + "-wal": true}
		f.w, f.done = w, make(chan struct{})
		go func() {
			defer close(f.done)
			trail := time.NewTimer(time.Hour)
			trail.Stop()
			defer trail.Stop()
			trailing := 0 // trailing wake-ups still to come
			wake := func() {
				bc.Signal()
				trailing = 2
				trail.Reset(trailWake)
			}
			for {
				select {
				case ev, ok := <-w.Events:
					if !ok {
						return
					}
					if names[ev.Name] && ev.Has(fsnotify.Write|fsnotify.Create) {
						wake()
					}
				case _, ok := <-w.Errors:
					if !ok {
						return
					}
					// An overflow lost events: a wake-up may be among them.
					wake()
				case <-trail.C:
					bc.Signal()
					if trailing--; trailing > 0 {
						trail.Reset(trailWake2)
					}
				}
			}
		}()
	})
	return f.w != nil
}

// close stops the watch, if it runs, and waits for it.
func (f *fileWake) close() error {
	f.once.Do(func() {}) // no watch starts after close
	if f.w == nil {
		return nil
	}
	err := f.w.Close()
	<-f.done
	return err
}

// trailWake and trailWake2 are how long after a file event the two
// trailing wake-ups come (see fileWake).
var (
	trailWake  = 50 * time.Millisecond
	trailWake2 = 500 * time.Millisecond
)

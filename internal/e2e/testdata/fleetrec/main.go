// Command fleetrec is the fleet test's recorder plugin. It serves two
// plugins that take every item, and for each Execute appends two lines to
// the file named by LETHE_RECORD_FILE:
//
//	S <tab> backup <tab> plugin <tab> item <tab> lethe pid
//	E <tab> backup <tab> plugin <tab> item <tab> lethe pid
//
// at the start and at the end of the item, each in one O_APPEND write, so
// the file's order is the order the events happened in across every
// replica's plugin processes. "lethe pid" is the pid of the lethe process
// that started this plugin process (its parent at start): it names the
// replica, and the test checks that no two replicas' runs of one backup
// overlap. LETHE_RECORD_SLEEP (a duration) is how long each item takes.
//
// LETHE_RECORD_PLUGINS (names, comma-separated) replaces the two plugins
// served, so that two copies of the binary serve different plugins.
// LETHE_RECORD_CRASH_EVERY=n makes the process crash (exit 3) at the
// start of every nth Execute it receives, after appending a line
//
//	C <tab> backup <tab> plugin <tab> item <tab> lethe pid
//
// the fault suite's plugin crash storm (internal/e2e/faults_*_test.go).
// With LETHE_RECORD_CRASH_DIR=<dir> too, it crashes instead on the first
// delivery of one item in n (by a hash of backup and item), leaving a
// file in dir so that the item's redelivery succeeds.
package main

import (
	"context"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lethehq/lethe/pkg/plugin"
)

var (
	out        *os.File
	owner      string
	sleep      time.Duration
	crashEvery int64
	crashDir   string
	calls      atomic.Int64
)

type rec struct{ name string }

// selector is LETHE_RECORD_LABEL_SELECTOR: the plugins take only what it
// selects (everything by default).
var selector string

func (r *rec) AppliesTo(context.Context) (plugin.ResourceSelector, error) {
	return plugin.ResourceSelector{LabelSelector: selector}, nil
}

func (r *rec) Execute(ctx context.Context, in *plugin.DeleteItemActionInput) error {
	it := in.Item
	line := in.Backup.Name + "\t" + r.name + "\t" + it.GroupResource() + "/" + it.Namespace + "/" + it.Name + "\t" + owner + "\n"
	if crashEvery > 0 && crash(line) {
		_, _ = out.WriteString("C\t" + line)
		os.Exit(3)
	}
	if _, err := out.WriteString("S\t" + line); err != nil {
		return err
	}
	if sleep > 0 {
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			_, _ = out.WriteString("E\t" + line)
			return ctx.Err()
		case <-t.C:
		}
	}
	_, err := out.WriteString("E\t" + line)
	return err
}

// crash reports whether this Execute crashes the process.
func crash(line string) bool {
	if crashDir == "" {
		return calls.Add(1)%crashEvery == 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(line[:strings.LastIndexByte(line[:len(line)-1], '\t')])) // without the lethe pid
	if h.Sum64()%uint64(crashEvery) != 0 {
		return false
	}
	mark := filepath.Join(crashDir, strconv.FormatUint(h.Sum64(), 16))
	f, err := os.OpenFile(mark, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false // crashed on it before
	}
	_ = f.Close()
	return true
}

func main() {
	f, err := os.OpenFile(os.Getenv("LETHE_RECORD_FILE"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		panic(err)
	}
	out, owner = f, strconv.Itoa(os.Getppid())
	if d, err := time.ParseDuration(os.Getenv("LETHE_RECORD_SLEEP")); err == nil {
		sleep = d
	}
	if n, err := strconv.ParseInt(os.Getenv("LETHE_RECORD_CRASH_EVERY"), 10, 64); err == nil && n > 0 {
		crashEvery = n
	}
	crashDir = os.Getenv("LETHE_RECORD_CRASH_DIR")
	selector = os.Getenv("LETHE_RECORD_LABEL_SELECTOR")
	names := []string{"test.lethe.io/a-first", "test.lethe.io/b-second"}
	if v := os.Getenv("LETHE_RECORD_PLUGINS"); v != "" {
		names = strings.Split(v, ",")
	}
	var plugins []*plugin.Plugin
	for _, n := range names {
		plugins = append(plugins, &plugin.Plugin{Name: n, Version: "v0.0.1", Action: &rec{name: n}, MaxConcurrency: 8})
	}
	plugin.Serve(plugins...)
}

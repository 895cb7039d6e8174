// Command gate is a test plugin for the end-to-end tests. It serves one
// plugin, e2e.lethe.io/gate, that takes every item and, for each one:
//
//   - creates $LETHE_GATE_DIR/started (so a test knows work has begun);
//   - waits while $LETHE_GATE_DIR/hold exists (so a test can keep a
//     deletion running for as long as it needs, without timing guesses);
//   - sleeps $LETHE_GATE_SLEEP (a Go duration) if set;
//   - appends "<item key>\n" to $LETHE_GATE_DIR/record.
//
// It runs one item at a time, so a per-item sleep makes a deletion last at
// least items × sleep.
package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lethehq/lethe/pkg/plugin"
)

type gate struct {
	dir   string
	sleep time.Duration
	mu    sync.Mutex
	out   *os.File
	once  sync.Once
}

func (g *gate) AppliesTo(context.Context) (plugin.ResourceSelector, error) {
	return plugin.ResourceSelector{}, nil
}

func (g *gate) Execute(ctx context.Context, in *plugin.DeleteItemActionInput) error {
	g.once.Do(func() {
		if f, err := os.Create(filepath.Join(g.dir, "started")); err == nil {
			f.Close()
		}
	})
	for {
		if _, err := os.Stat(filepath.Join(g.dir, "hold")); errors.Is(err, os.ErrNotExist) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	if g.sleep > 0 {
		time.Sleep(g.sleep)
	}
	it := in.Item
	g.mu.Lock()
	defer g.mu.Unlock()
	_, err := g.out.WriteString(it.GroupResource() + "/" + it.Namespace + "/" + it.Name + "\n")
	return err
}

func main() {
	dir := os.Getenv("LETHE_GATE_DIR")
	f, err := os.OpenFile(filepath.Join(dir, "record"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		panic(err)
	}
	g := &gate{dir: dir, out: f}
	if s := os.Getenv("LETHE_GATE_SLEEP"); s != "" {
		if g.sleep, err = time.ParseDuration(s); err != nil {
			panic(err)
		}
	}
	plugin.Serve(&plugin.Plugin{Name: "e2e.lethe.io/gate", Version: "v0.0.1", Action: g, MaxConcurrency: 1})
}

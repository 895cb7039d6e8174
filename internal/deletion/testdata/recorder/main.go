// Command recorder is a test plugin binary for the deletion pipeline. It
// serves three plugins and appends "<plugin>\t<item key>\n" to the file named
// by LETHE_RECORD_FILE for every item it executes.
//
//   - test.lethe.io/a-first and test.lethe.io/b-second take every item;
//   - test.lethe.io/c-pods takes only pods;
//   - with LETHE_RECORD_LABELLED set, test.lethe.io/d-labelled takes items
//     labelled tier=db.
//
// With LETHE_RECORD_CONTROL_DIR=<dir>, a-first fails an item while
// <dir>/<name>.fail exists, and returns Blocked while <dir>/<name>.lock
// exists (retry after the duration the file holds, one minute if none);
// b-second fails an item while <dir>/<name>.fail-b exists. Files,
// not environment variables, so a test can change them while
// the plugin process runs.
//
// With LETHE_RECORD_BACKUP=<file>, every Execute writes the Backup it
// received (plugin.Backup as JSON) to that file.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lethehq/lethe/pkg/plugin"
)

type recorder struct {
	name     string
	selector plugin.ResourceSelector
	gate     bool
}

var (
	mu  sync.Mutex
	out *os.File
)

func (r *recorder) AppliesTo(context.Context) (plugin.ResourceSelector, error) {
	return r.selector, nil
}

func (r *recorder) Execute(_ context.Context, in *plugin.DeleteItemActionInput) error {
	it := in.Item
	if d := os.Getenv("LETHE_RECORD_CONTROL_DIR"); d != "" && r.name == "test.lethe.io/b-second" {
		if _, err := os.Stat(filepath.Join(d, it.Name+".fail-b")); err == nil {
			return errors.New("injected failure in b-second for " + it.Name)
		}
	}
	if r.gate {
		if d := os.Getenv("LETHE_RECORD_CONTROL_DIR"); d != "" {
			if _, err := os.Stat(filepath.Join(d, it.Name+".fail")); err == nil {
				return errors.New("injected failure for " + it.Name)
			}
			if b, err := os.ReadFile(filepath.Join(d, it.Name+".lock")); err == nil {
				// The lock file may hold the retryAfter to ask for.
				after, perr := time.ParseDuration(strings.TrimSpace(string(b)))
				if perr != nil {
					after = time.Minute
				}
				// The error itself, not plugin.Blocked (which turns a
				// negative value into zero): as any plugin, in any
				// language, may send.
				return &plugin.BlockedError{RetryAfter: after, Reason: it.Name + " is locked"}
			}
		}
	}
	if p := os.Getenv("LETHE_RECORD_BACKUP"); p != "" {
		data, err := json.Marshal(in.Backup)
		if err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return err
		}
	}
	line := r.name + "\t" + it.GroupResource() + "/" + it.Namespace + "/" + it.Name + "\n"
	mu.Lock()
	defer mu.Unlock()
	_, err := out.WriteString(line)
	return err
}

func main() {
	f, err := os.OpenFile(os.Getenv("LETHE_RECORD_FILE"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		panic(err)
	}
	out = f
	plugins := []*plugin.Plugin{
		{Name: "test.lethe.io/b-second", Version: "v0.0.1", Action: &recorder{name: "test.lethe.io/b-second"}, MaxConcurrency: 16},
		{Name: "test.lethe.io/a-first", Version: "v0.0.1", Action: &recorder{name: "test.lethe.io/a-first", gate: true}, MaxConcurrency: 16},
		{Name: "test.lethe.io/c-pods", Version: "v0.0.1", Action: &recorder{
			name: "test.lethe.io/c-pods", selector: plugin.ResourceSelector{IncludedResources: []string{"pods"}},
		}, MaxConcurrency: 16},
	}
	if os.Getenv("LETHE_RECORD_LABELLED") != "" {
		plugins = append(plugins, &plugin.Plugin{Name: "test.lethe.io/d-labelled", Version: "v0.0.1", Action: &recorder{
			name: "test.lethe.io/d-labelled", selector: plugin.ResourceSelector{LabelSelector: "tier=db"},
		}})
	}
	plugin.Serve(plugins...)
}

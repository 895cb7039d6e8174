package cli

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/lethehq/lethe/internal/pluginhost"
)

// trustFlags are the flags that decide what plugins get and what Lethe
// trusts before running them.
type trustFlags struct {
	pluginEnv   []string
	lockFile    string
	requireLock bool
	pluginUser  string

	// Parsed by resolve.
	pluginEnvM map[string]map[string]string
}

func (f *trustFlags) add(pf *pflag.FlagSet) {
	pf.StringArrayVar(&f.pluginEnv, "plugin-env", nil, "set KEY=VALUE in the environment of plugin binary NAME (its file name in the plugin folder), as `NAME:KEY=VALUE`; repeatable. Of Lethe's own environment, plugins get only PATH, HOME, LANG, TZ, TMPDIR and LETHE_PLUGIN_LOG_LEVEL (env LETHE_PLUGIN_ENV, one entry a line)")
	pf.StringVar(&f.lockFile, "plugin-lock", "", "plugin lock `FILE`; keep it outside the plugin folder so that whoever can write the folder cannot remove it (env LETHE_PLUGIN_LOCK; default <plugin-dir>/lethe-plugins.lock)")
	pf.BoolVar(&f.requireLock, "require-plugin-lock", false, "refuse to run plugins without a lock file (env LETHE_REQUIRE_PLUGIN_LOCK=true)")
	pf.StringVar(&f.pluginUser, "plugin-user", "", "run plugin processes as `USER` (name or uid), apart from Lethe's own; Lethe must run as root (env LETHE_PLUGIN_USER)")
}

// resolve fills the flags from the environment and parses them.
func (f *trustFlags) resolve(getenv func(string) string) error {
	if len(f.pluginEnv) == 0 {
		for _, line := range strings.Split(getenv("LETHE_PLUGIN_ENV"), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				f.pluginEnv = append(f.pluginEnv, line)
			}
		}
	}
	if f.lockFile == "" {
		f.lockFile = getenv("LETHE_PLUGIN_LOCK")
	}
	if f.lockFile != "" {
		abs, err := filepath.Abs(f.lockFile)
		if err != nil {
			return usageError{fmt.Errorf("--plugin-lock %q: %w", f.lockFile, err)}
		}
		f.lockFile = abs
	}
	if !f.requireLock {
		if v := getenv("LETHE_REQUIRE_PLUGIN_LOCK"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return usageError{fmt.Errorf("LETHE_REQUIRE_PLUGIN_LOCK=%q: use true or false", v)}
			}
			f.requireLock = b
		}
	}
	if f.pluginUser == "" {
		f.pluginUser = getenv("LETHE_PLUGIN_USER")
	}
	f.pluginEnvM = map[string]map[string]string{}
	for _, e := range f.pluginEnv {
		name, kv, ok1 := strings.Cut(e, ":")
		key, val, ok2 := strings.Cut(kv, "=")
		if !ok1 || !ok2 || name == "" || key == "" {
			return usageError{fmt.Errorf("--plugin-env %q: use NAME:KEY=VALUE, e.g. snapshot-files:LETHE_SNAPSHOT_DIR=/srv/snapshots", e)}
		}
		if pluginhost.ReservedEnv(key) {
			return usageError{fmt.Errorf("--plugin-env %q: %s is set by Lethe itself for every plugin and cannot be configured", e, key)}
		}
		if f.pluginEnvM[name] == nil {
			f.pluginEnvM[name] = map[string]string{}
		}
		if _, dup := f.pluginEnvM[name][key]; dup {
			return usageError{fmt.Errorf("--plugin-env %q: %s is configured twice for %s", e, key, name)}
		}
		f.pluginEnvM[name][key] = val
	}
	return nil
}

// lockFile is the plugin lock file in use.
func (g *globals) lockFile() string {
	if g.trust.lockFile != "" {
		return g.trust.lockFile
	}
	return pluginhost.DefaultLockFile(g.pluginDir)
}

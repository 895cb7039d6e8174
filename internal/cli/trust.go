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
	pluginEnv      []string
	lockFile       string
	veleroLockFile string
	requireLock    bool
	pluginUser     string

	// requireLockFlag is --require-plugin-lock, to tell a value given (by
	// the flag or the config file) from the default.
	requireLockFlag *pflag.Flag
	// requireLockSet: --require-plugin-lock or LETHE_REQUIRE_PLUGIN_LOCK
	// was given (lethe server requires a lock unless told otherwise).
	requireLockSet bool
	// lockConfigured: a lock file path was given; it must then exist
	// wherever plugins run (deleting it must not unpin them).
	lockConfigured bool

	// Parsed by resolve.
	pluginEnvM map[string]map[string]string
}

func (f *trustFlags) add(pf *pflag.FlagSet) {
	pf.StringArrayVar(&f.pluginEnv, "plugin-env", nil, "set KEY=VALUE in the environment of plugin binary NAME (its file name in the plugin folder), as `NAME:KEY=VALUE`; repeatable. Of Lethe's own environment, plugins get only PATH, HOME, LANG, TZ, TMPDIR and LETHE_PLUGIN_LOG_LEVEL (env LETHE_PLUGIN_ENV, one entry a line)")
	pf.StringVar(&f.lockFile, "plugin-lock", "", "plugin lock `FILE`; keep it outside the plugin folder so that whoever can write the folder cannot remove it (env LETHE_PLUGIN_LOCK; default <plugin-dir>/lethe-plugins.lock)")
	pf.StringVar(&f.veleroLockFile, "velero-plugin-lock", "", "lock `FILE` of the Velero plugins; keep it outside their folder, like --plugin-lock (env LETHE_VELERO_PLUGIN_LOCK; default <velero-plugin-dir>/lethe-plugins.lock)")
	pf.BoolVar(&f.requireLock, "require-plugin-lock", false, "refuse to run plugins without a lock file (env LETHE_REQUIRE_PLUGIN_LOCK=true; default on for lethe server, off for the other commands)")
	f.requireLockFlag = pf.Lookup("require-plugin-lock")
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
	if f.veleroLockFile == "" {
		f.veleroLockFile = getenv("LETHE_VELERO_PLUGIN_LOCK")
	}
	for _, l := range []struct {
		flag string
		path *string
	}{{"--plugin-lock", &f.lockFile}, {"--velero-plugin-lock", &f.veleroLockFile}} {
		if *l.path == "" {
			continue
		}
		abs, err := filepath.Abs(*l.path)
		if err != nil {
			return usageError{fmt.Errorf("%s %q: %w", l.flag, *l.path, err)}
		}
		*l.path = abs
		f.lockConfigured = true
	}
	f.requireLockSet = f.requireLockFlag != nil && f.requireLockFlag.Changed
	if !f.requireLockSet {
		if v := getenv("LETHE_REQUIRE_PLUGIN_LOCK"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return usageError{fmt.Errorf("LETHE_REQUIRE_PLUGIN_LOCK=%q: use true or false", v)}
			}
			f.requireLock = b
			f.requireLockSet = true
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

// veleroLockFile is the Velero plugins' lock file in use.
func (g *globals) veleroLockFile() string {
	if g.trust.veleroLockFile != "" {
		return g.trust.veleroLockFile
	}
	return pluginhost.DefaultLockFile(g.veleroPluginDir)
}

// requireLock says whether the plugin host must refuse binaries that no
// lock file pins: when asked to, and whenever a lock file path is
// configured (then deleting that file must not unpin the plugins).
func (g *globals) requireLock() bool {
	return g.trust.requireLock || g.trust.lockConfigured
}

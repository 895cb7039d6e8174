package pluginhost

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/lethehq/lethe/pkg/plugin"
)

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ReservedEnv reports whether key is a variable Lethe or go-plugin sets for
// every plugin process (the handshake cookie, PLUGIN_*, LETHE_PLUGIN_*),
// which the operator may not configure. The log level is the exception:
// it may be configured per plugin.
func ReservedEnv(key string) bool {
	switch {
	case key == plugin.LogLevelEnv:
		return false
	case key == plugin.Handshake.MagicCookieKey,
		strings.HasPrefix(key, "PLUGIN_"),
		strings.HasPrefix(key, "LETHE_PLUGIN_"):
		return true
	}
	return false
}

// EnvError is a plugin environment configuration (Config.PluginEnv) that
// cannot be used: a bad or reserved key, or a binary that is not in the
// plugin folder. Nothing has started when New returns one.
type EnvError struct{ msg string }

func (e *EnvError) Error() string { return e.msg }

func envErrorf(format string, args ...any) error { return &EnvError{msg: fmt.Sprintf(format, args...)} }

// validateEnv checks Config.PluginEnv's keys and values; that each binary
// exists is checked once the folder is listed.
func validateEnv(env map[string]map[string]string) error {
	for bin, vars := range env {
		if bin == "" || strings.ContainsRune(bin, 0) {
			return envErrorf("plugin environment: %q is not a binary name", bin)
		}
		for _, key := range slices.Sorted(maps.Keys(vars)) {
			if !envKeyRE.MatchString(key) {
				return envErrorf("plugin environment for %s: %q is not a valid variable name (letters, digits and _, not starting with a digit)", bin, key)
			}
			if ReservedEnv(key) {
				return envErrorf("plugin environment for %s: %s is set by Lethe itself for every plugin and cannot be configured", bin, key)
			}
			if strings.ContainsRune(vars[key], 0) {
				return envErrorf("plugin environment for %s: the value of %s contains a NUL byte", bin, key)
			}
		}
	}
	return nil
}

// checkEnvBinaries checks that every binary Config.PluginEnv configures is
// in the plugin folder.
func checkEnvBinaries(env map[string]map[string]string, dir string, bins []binEntry) error {
	have := map[string]bool{}
	var names []string
	for _, b := range bins {
		have[b.name()] = true
		names = append(names, b.name())
	}
	for _, bin := range slices.Sorted(maps.Keys(env)) {
		if have[bin] {
			continue
		}
		msg := fmt.Sprintf("plugin environment for %q: no plugin binary of that name in %s", bin, dir)
		if i := strings.LastIndexByte(bin, '/'); i >= 0 && have[bin[i+1:]] {
			msg += fmt.Sprintf("; the environment is per process, so name the binary file (%s), not a plugin it serves", bin[i+1:])
		} else if len(names) > 0 {
			msg += " (binaries: " + strings.Join(names, ", ") + ")"
		}
		return &EnvError{msg: msg}
	}
	return nil
}

// baseEnv is what a plugin process starts from: the variables of
// plugin.PassedEnv that the host has, then home (the plugin user's home
// folder, when plugins run as another user), then what the operator
// configured for the binary, each key once, later sources winning. The
// host appends its own variables after these, and go-plugin its handshake
// variables after those, so that nothing here overrides them.
func baseEnv(configured map[string]string, home string) []string {
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, k := range plugin.PassedEnv() {
		if v, ok := os.LookupEnv(k); ok {
			set(k, v)
		}
	}
	if home != "" {
		set("HOME", home)
	}
	for _, k := range slices.Sorted(maps.Keys(configured)) {
		set(k, configured[k])
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out
}

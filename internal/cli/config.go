package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/lethehq/lethe/internal/pluginhost"
)

// The config file holds settings under the names of their flags, e.g.
//
//	store: postgres://lethe@db/lethe
//	log-format: json
//	plugin-timeout: [example.com/ebs=30m]
//	workers: 4            # lethe server
//
// A flag given on the command line wins over its environment variable,
// which wins over the file. Keys are checked before anything runs: an
// unknown key or a value its flag refuses is one line and exit 2.

// serverConfigKeys are the `lethe server` flags a config file (and an
// environment variable) may set: every flag of its own, so that a new
// server flag cannot be forgotten here.
func serverConfigKeys(root *cobra.Command) []string {
	var keys []string
	for _, c := range root.Commands() {
		if c.Name() != "server" {
			continue
		}
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			if !slices.Contains(notInConfig, f.Name) {
				keys = append(keys, f.Name)
			}
		})
	}
	return keys
}

// notInConfig are global flags that make no sense in the file.
var notInConfig = []string{"config", "help", "version"}

// envName is the environment variable of a flag.
func envName(flag string) string {
	if flag == "plugin-timeout" {
		return "LETHE_PLUGIN_TIMEOUTS"
	}
	return "LETHE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// configKeys lists every key a config file may hold: the global flags and
// the server's.
func configKeys(root *cobra.Command) []string {
	var keys []string
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !slices.Contains(notInConfig, f.Name) {
			keys = append(keys, f.Name)
		}
	})
	keys = append(keys, serverConfigKeys(root)...)
	slices.Sort(keys)
	return keys
}

// configPath is --config, else LETHE_CONFIG, else <home>/config.yaml;
// explicit says the file must exist.
func configPath(cmd *cobra.Command, getenv func(string) string) (path string, explicit bool, err error) {
	if f := cmd.Flags().Lookup("config"); f != nil && f.Value.String() != "" {
		return f.Value.String(), true, nil
	}
	if p := getenv("LETHE_CONFIG"); p != "" {
		return p, true, nil
	}
	home := ""
	if f := cmd.Flags().Lookup("home"); f != nil {
		home = f.Value.String()
	}
	if home == "" {
		home = getenv("LETHE_HOME")
	}
	if home == "" {
		data := getenv("XDG_DATA_HOME")
		if data == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return "", false, nil // resolve reports the missing home
			}
			data = filepath.Join(h, ".local", "share")
		}
		home = filepath.Join(data, "lethe")
	}
	return filepath.Join(home, "config.yaml"), false, nil
}

// applyConfig reads the config file and the server flags' environment
// variables into the flags of cmd that were not given on the command line.
func applyConfig(root, cmd *cobra.Command, getenv func(string) string) error {
	// The server's own flags take their environment variables here (the
	// global ones in globals.resolve).
	if cmd.Name() == "server" {
		for _, k := range serverConfigKeys(root) {
			f := cmd.Flags().Lookup(k)
			if f == nil || f.Changed {
				continue
			}
			if v := getenv(envName(k)); v != "" {
				if err := cmd.Flags().Set(k, v); err != nil {
					return usageError{fmt.Errorf("%s=%q: %v", envName(k), v, err)}
				}
			}
		}
	}
	path, explicit, err := configPath(cmd, getenv)
	if err != nil || path == "" {
		return err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return nil
	}
	if err != nil {
		return usageError{fmt.Errorf("config file: %w", err)}
	}
	// The file names the plugins' environment, the lock and the catalog:
	// someone who may change it may change what Lethe runs. It gets the
	// plugin folder's rule (sshd's), checked after the read so that a
	// missing file is still reported as missing.
	if err := pluginhost.CheckTrusted("config file", path); err != nil {
		return err
	}
	settings, err := parseConfig(b)
	if err != nil {
		return usageError{fmt.Errorf("config file %s: %w", path, err)}
	}
	known := configKeys(root)
	for _, k := range sortedKeys(settings) {
		if !slices.Contains(known, k) {
			return usageError{fmt.Errorf("config file %s: unknown key %q (keys are flag names: %s)", path, k, strings.Join(known, ", "))}
		}
	}
	for _, k := range sortedKeys(settings) {
		vals := settings[k]
		f := cmd.Flags().Lookup(k)
		var err error
		if f == nil {
			// Another command's setting (e.g. workers, for server):
			// check it against that command's flag, then leave it.
			err = checkForeign(root, k, vals)
		} else if f.Changed || getenv(envName(k)) != "" {
			continue // the command line, then the environment, win
		} else {
			err = setFlag(cmd.Flags(), f, vals)
		}
		if err != nil {
			return usageError{fmt.Errorf("config file %s: %s: %w", path, k, err)}
		}
	}
	return nil
}

func setFlag(fs *pflag.FlagSet, f *pflag.Flag, cv configValue) error {
	list := strings.HasSuffix(f.Value.Type(), "Array") || strings.HasSuffix(f.Value.Type(), "Slice")
	if cv.list && !list {
		return fmt.Errorf("want one value, got a list of %d", len(cv.vals))
	}
	for _, v := range cv.vals {
		if err := fs.Set(f.Name, v); err != nil {
			return fmt.Errorf("invalid value %q: %v", v, want(f.Value.Type(), err))
		}
	}
	return nil
}

// checkForeign validates a setting of another command on a fresh flag of
// the same type, so that a bad value is found whichever command runs.
func checkForeign(root *cobra.Command, key string, vals configValue) error {
	for _, c := range root.Commands() {
		f := c.Flags().Lookup(key)
		if f == nil {
			continue
		}
		fs := pflag.NewFlagSet("check", pflag.ContinueOnError)
		switch f.Value.Type() {
		case "int":
			fs.Int(key, 0, "")
		case "bool":
			fs.Bool(key, false, "")
		case "duration":
			fs.Duration(key, 0, "")
		default:
			fs.String(key, "", "")
		}
		return setFlag(fs, fs.Lookup(key), vals)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// want says what a flag of type typ takes.
func want(typ string, err error) error {
	switch typ {
	case "int":
		return errors.New("want a whole number")
	case "bool":
		return errors.New("want true or false")
	case "duration":
		return errors.New("want a duration such as 30s, 5m or 1h")
	}
	return unwrapFlagError(err)
}

func unwrapFlagError(err error) error {
	// pflag says `invalid argument "x" for "--workers" flag: strconv...`;
	// keep the reason.
	msg := err.Error()
	if i := strings.LastIndex(msg, "flag: "); i >= 0 {
		return errors.New(msg[i+len("flag: "):])
	}
	return err
}

// configValue is one setting of the config file: its values (a scalar is
// one, a list its items, as strings), whether it was written as a list,
// and its line.
type configValue struct {
	vals []string
	list bool
	line int
}

// parseConfig turns the YAML file into key → value, strictly, as
// manifests are read: valid UTF-8, one document, one mapping of settings,
// each key once, each value a scalar or a list of scalars. An error names
// the key (or the line) at fault.
func parseConfig(b []byte) (map[string]configValue, error) {
	if !utf8.Valid(b) {
		i := 0
		for i < len(b) {
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			i += n
		}
		return nil, fmt.Errorf("line %d: not valid UTF-8", bytes.Count(b[:i], []byte("\n"))+1)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	out := map[string]configValue{}
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return out, nil // empty file
	} else if err != nil {
		return nil, fmt.Errorf("not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		return nil, fmt.Errorf("line %d: a second document (after ---): the config file is one mapping of settings", line)
	} else if !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return out, nil
	}
	m := doc.Content[0]
	if m.Kind == yaml.ScalarNode && m.Tag == "!!null" {
		return out, nil // only comments
	}
	if m.Kind != yaml.MappingNode {
		return nil, errors.New("want a mapping of settings, e.g. `store: postgres://...`")
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], m.Content[i+1]
		if kn.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: a key must be a flag name", kn.Line)
		}
		k := kn.Value
		if prev, ok := out[k]; ok {
			return nil, fmt.Errorf("%s: given twice (lines %d and %d); keep one", k, prev.line, kn.Line)
		}
		v := configValue{line: kn.Line}
		switch vn.Kind {
		case yaml.SequenceNode:
			v.list = true
			for _, item := range vn.Content {
				s, err := configScalar(k, item)
				if err != nil {
					return nil, err
				}
				v.vals = append(v.vals, s)
			}
		case yaml.AliasNode:
			return nil, fmt.Errorf("%s: an alias (*name) is not a setting; write the value", k)
		default:
			s, err := configScalar(k, vn)
			if err != nil {
				return nil, err
			}
			v.vals = []string{s}
		}
		out[k] = v
	}
	return out, nil
}

// configScalar is the string of a scalar value.
func configScalar(k string, n *yaml.Node) (string, error) {
	switch {
	case n.Kind == yaml.MappingNode:
		return "", fmt.Errorf("%s: want a value or a list of values, not a mapping", k)
	case n.Kind != yaml.ScalarNode:
		return "", fmt.Errorf("%s: want a value or a list of values", k)
	case n.Tag == "!!null":
		return "", fmt.Errorf("%s: empty value", k)
	}
	return n.Value, nil
}

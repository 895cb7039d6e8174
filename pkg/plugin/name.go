package plugin

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// BuiltinPrefix is the DNS subdomain reserved for Lethe's own plugins. A bare
// plugin name "foo" means "lethe.io/foo".
const BuiltinPrefix = "lethe.io"

// NormalizeName resolves a plugin name to its full form
// "<dns-subdomain>/<name>" and validates it. A bare name "foo" becomes
// "lethe.io/foo". The subdomain must be a lowercase RFC 1123 subdomain
// ("example.com") and the name a lowercase RFC 1123 label ("ebs-snapshots").
func NormalizeName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("plugin name is empty")
	}
	prefix, local, ok := strings.Cut(name, "/")
	if !ok {
		prefix, local = BuiltinPrefix, name
	}
	if strings.Contains(local, "/") {
		return "", fmt.Errorf("plugin name %q: want <dns-subdomain>/<name>, e.g. example.com/ebs-snapshots", name)
	}
	if errs := validation.IsDNS1123Subdomain(prefix); len(errs) > 0 {
		return "", fmt.Errorf("plugin name %q: prefix %q: %s", name, prefix, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(local); len(errs) > 0 {
		return "", fmt.Errorf("plugin name %q: name %q: %s", name, local, strings.Join(errs, "; "))
	}
	return prefix + "/" + local, nil
}

// BuiltinPlugins are the only plugins allowed under the reserved
// BuiltinPrefix: the ones Lethe ships (in its plugins/ folder). The host
// refuses any other binary that claims a lethe.io/ name, and Serve refuses
// to serve one.
var BuiltinPlugins = []string{"lethe.io/native-snapshots", "lethe.io/noop", "lethe.io/snapshot-files"}

// CheckReserved returns an error when full (a name NormalizeName returned)
// is under the reserved BuiltinPrefix but is not one of BuiltinPlugins.
// Third-party plugins use a domain of their own, e.g. example.com/name.
func CheckReserved(full string) error {
	prefix, local, _ := strings.Cut(full, "/")
	if prefix != BuiltinPrefix || slices.Contains(BuiltinPlugins, full) {
		return nil
	}
	return fmt.Errorf("plugin name %q: the %s/ prefix (and a bare name) is reserved for Lethe's own plugins; name it under a domain you control, e.g. example.com/%s", full, BuiltinPrefix, local)
}

// MaxVersionLen is the longest Plugin.Version accepted.
const MaxVersionLen = 64

// ValidateVersion checks a plugin's Version: empty, or at most
// MaxVersionLen characters of [0-9A-Za-z.+_-] starting with a letter or
// digit ("v1.2.3", "1.0.0-rc.1+build.5"). The host refuses a binary that
// reports another.
func ValidateVersion(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > MaxVersionLen {
		return fmt.Errorf("version is %d characters long; at most %d are allowed", len(v), MaxVersionLen)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		alnum := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !alnum && (i == 0 || !strings.ContainsRune(".+_-", rune(c))) {
			return fmt.Errorf("version %q: want letters, digits and . + _ - only, starting with a letter or digit (e.g. v1.2.3)", v)
		}
	}
	return nil
}

package plugin

import (
	"fmt"
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

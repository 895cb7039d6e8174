package archive

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lethehq/lethe/internal/termtext"
)

// The tarball layout, format 1.x:
//
//	metadata/version                                          "1.1.0"
//	resources/<resource>[.<group>]/namespaces/<ns>/<name>.json         an item
//	resources/<resource>[.<group>]/cluster/<name>.json                 an item
//	resources/<resource>[.<group>]/<version>[-preferredversion]/namespaces/<ns>/<name>.json  a copy
//	resources/<resource>[.<group>]/<version>[-preferredversion]/cluster/<name>.json          a copy
//
// Every other regular file is ignored: anything outside resources/ other than
// metadata/version (Velero writes nothing else today, and may add metadata),
// and any file under resources/ whose name does not end in ".json". A ".json"
// file under resources/ that fits none of the shapes above is rejected, so
// that no item can hide from the plugins behind an odd path.
const (
	versionFile     = "metadata/version"
	resourcesPrefix = "resources/"
	preferredSuffix = "-preferredversion"
)

// cleanName checks a tar entry name and returns it in canonical form: no
// leading "./", no trailing "/". It returns a reason when the name is unsafe.
func cleanName(name string, dir bool) (string, string) {
	n := strings.TrimPrefix(name, "./")
	if dir {
		n = strings.TrimSuffix(n, "/")
	}
	switch {
	case n == "" && dir:
		return n, "" // "./" itself
	case n == "" || n == ".":
		return n, "empty path"
	case strings.HasPrefix(n, "/") || filepath.IsAbs(n):
		return n, "absolute path"
	case strings.ContainsAny(n, "\\\x00"):
		return n, "backslash or NUL in path"
	case !filepath.IsLocal(n):
		return n, "path traversal: the path escapes the archive"
	}
	for el := range strings.SplitSeq(n, "/") {
		switch el {
		case "..":
			return n, "path traversal (\"..\")"
		case ".", "":
			return n, "non-canonical path (empty or \".\" element)"
		}
	}
	return n, ""
}

// itemPath is a parsed item or copy path. Its strings alias the entry name.
type itemPath struct {
	gr        string // "resource.group" or "resource"
	resource  string
	group     string
	dir       string // "" for an item, else the version directory
	version   string // dir without "-preferredversion"
	namespace string
	name      string
}

// parseItemPath parses a ".json" path under resources/. It returns a reason
// when the path does not fit Velero's layout.
func parseItemPath(p string) (itemPath, string) {
	var ip itemPath
	// The parts are split into an array, sparing an allocation per item:
	// a valid path has at most 5.
	var buf [6]string
	parts := buf[:0]
	for el := range strings.SplitSeq(strings.TrimPrefix(p, resourcesPrefix), "/") {
		if len(parts) == len(buf) {
			break // too many: refused below
		}
		parts = append(parts, el)
	}
	// parts[0] is the group-resource; the rest is one of
	//   cluster/F | namespaces/NS/F | DIR/cluster/F | DIR/namespaces/NS/F
	rest := parts[1:]
	if len(rest) >= 3 && rest[0] != "namespaces" && rest[0] != "cluster" {
		ip.dir, rest = rest[0], rest[1:]
	}
	var file string
	switch {
	case len(rest) == 2 && rest[0] == "cluster":
		file = rest[1]
	case len(rest) == 3 && rest[0] == "namespaces":
		ip.namespace, file = rest[1], rest[2]
	default:
		return ip, "a .json file under resources/ outside Velero's layout (resources/<resource>.<group>/[<version>/]{namespaces/<ns>,cluster}/<name>.json)"
	}
	ip.gr = parts[0]
	ip.resource, ip.group, _ = strings.Cut(ip.gr, ".")
	ip.name = strings.TrimSuffix(file, ".json")
	switch {
	case ip.resource == "" || strings.HasSuffix(ip.gr, "."):
		return ip, "empty resource or group in path"
	case ip.name == "":
		return ip, "empty item name in path"
	}
	if ip.dir != "" {
		ip.version = strings.TrimSuffix(ip.dir, preferredSuffix)
		if !isDNSLabel(ip.version) {
			return ip, "version directory " + strconv.Quote(ip.dir) + " is not <version> or <version>-preferredversion"
		}
	}
	return ip, ""
}

// controlInName says which part of an item's path holds a rune that no
// Kubernetes name can (a control character, DEL, a bidi control, or a
// byte that is not UTF-8), or "". Such a name would reach an operator's
// terminal as an escape sequence, so the tarball is refused.
func controlInName(ip itemPath) string {
	for _, part := range [...]struct{ what, s string }{
		{"item name", ip.name}, {"namespace", ip.namespace}, {"resource", ip.gr},
	} {
		if r, bad := termtext.Control(part.s); bad {
			return part.what + " " + strconv.Quote(part.s) + " holds " + termtext.Describe(r) + ", which no Kubernetes name can"
		}
	}
	return ""
}

// isDNSLabel reports whether s is a DNS-1035 label, the rule for Kubernetes
// API versions (v1, v1beta2, …).
func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] < 'a' || s[0] > 'z' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// supportedVersion reports whether a metadata/version body names format 1.x.x.
func supportedVersion(v string) bool {
	parts := strings.Split(v, ".")
	if len(parts) != 3 || parts[0] != "1" {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > 9 || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

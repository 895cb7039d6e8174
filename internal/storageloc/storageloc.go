// Package storageloc declares Lethe's named backup storage locations,
// after Velero's BackupStorageLocation: a name, a URL (file:// or s3://),
// whether it is read-only, which one is the default, and where its
// credentials come from: a credentials file of its own
// (credentials-file=FILE, owner-only), or else the environment
// (AWS_ACCESS_KEY_ID, AWS_PROFILE, shared config files); never the
// command line.
package storageloc

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/lethehq/lethe/internal/blobstore"
)

// Phases of a location, as Velero's BackupStorageLocation says them.
const (
	PhaseAvailable   = "Available"
	PhaseUnavailable = "Unavailable"
)

// DefaultName is the name of the one location --storage declares.
const DefaultName = "default"

// Location is one declared storage location.
type Location struct {
	Name string `json:"name"`
	// URL is the location, without credentials (blobstore.Location).
	URL      string `json:"url"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	Default  bool   `json:"default,omitempty"`
	// CredentialsFile is the location's own credentials file (an s3://
	// location); empty: credentials from the environment.
	CredentialsFile string `json:"credentialsFile,omitempty"`
	// Credentials are read from CredentialsFile by Resolve; never shown.
	Credentials *Credentials `json:"-"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// Parse reads one --location value:
//
//	NAME=URL[,default][,readOnly][,credentials-file=FILE]
//
// A URL that carries credentials (user info) is refused: they would be
// on the command line, in the shell history and in ps. FILE, made
// absolute, is not read here (see Resolve).
func Parse(spec string) (Location, error) {
	name, rest, ok := strings.Cut(strings.TrimSpace(spec), "=")
	if !ok || rest == "" {
		return Location{}, fmt.Errorf("--location %q: use NAME=URL[,default][,readOnly][,credentials-file=FILE]", spec)
	}
	if !nameRE.MatchString(name) {
		return Location{}, fmt.Errorf("--location %q: the name must be a lowercase DNS label (a-z, 0-9, '-'), at most 63 characters", spec)
	}
	parts := strings.Split(rest, ",")
	if strings.Contains(strings.SplitN(parts[0], "?", 2)[0], "@") {
		return Location{}, fmt.Errorf("--location %s: the URL carries credentials; give them in the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE), never on the command line", name)
	}
	url, err := blobstore.Location(parts[0])
	if err != nil {
		return Location{}, fmt.Errorf("--location %s: %s", name, strings.TrimPrefix(err.Error(), "blobstore: "))
	}
	l := Location{Name: name, URL: url}
	for _, p := range parts[1:] {
		p = strings.TrimSpace(p)
		if file, ok := strings.CutPrefix(p, "credentials-file="); ok {
			if !strings.HasPrefix(url, "s3://") {
				return Location{}, fmt.Errorf("--location %s: credentials-file is for an s3:// location", name)
			}
			if file == "" {
				return Location{}, fmt.Errorf("--location %s: credentials-file= needs a FILE", name)
			}
			abs, err := filepath.Abs(file)
			if err != nil {
				return Location{}, fmt.Errorf("--location %s: credentials-file: %w", name, err)
			}
			l.CredentialsFile = abs
			continue
		}
		switch p {
		case "default":
			l.Default = true
		case "readOnly", "read-only":
			l.ReadOnly = true
		default:
			return Location{}, fmt.Errorf("--location %s: unknown option %q (want default, readOnly or credentials-file=FILE)", name, p)
		}
	}
	return l, nil
}

// Set is the declared locations, the default first.
type Set []Location

// Resolve checks the declared locations (specs, as --location gives them)
// and returns them with the default first. With no location declared,
// storageURL (--storage) is the one location, named "default". Names and
// URLs are unique; exactly one is the default (the only one needs no
// mark). Each credentials-file is read now (ReadCredentials): one that is
// missing, malformed, or open to group or others is refused.
func Resolve(specs []string, storageURL string, storageExplicit bool) (Set, error) {
	if len(specs) == 0 {
		url, err := blobstore.Location(storageURL)
		if err != nil {
			return nil, err
		}
		return Set{{Name: DefaultName, URL: url, Default: true}}, nil
	}
	if storageExplicit {
		return nil, errors.New("--storage and --location are exclusive: --storage is the shortcut for one location; declare the others with --location")
	}
	var s Set
	for _, spec := range specs {
		l, err := Parse(spec)
		if err != nil {
			return nil, err
		}
		if l.CredentialsFile != "" {
			if l.Credentials, err = ReadCredentials(l.CredentialsFile); err != nil {
				return nil, fmt.Errorf("--location %s: credentials-file %w", l.Name, err)
			}
		}
		for _, o := range s {
			if o.Name == l.Name {
				return nil, fmt.Errorf("--location %s: declared twice", l.Name)
			}
			if o.URL == l.URL {
				return nil, fmt.Errorf("--location %s: same URL as location %s", l.Name, o.Name)
			}
		}
		s = append(s, l)
	}
	if len(s) == 1 {
		s[0].Default = true
	}
	var defs []string
	for _, l := range s {
		if l.Default {
			defs = append(defs, l.Name)
		}
	}
	switch {
	case len(defs) == 0:
		return nil, fmt.Errorf("--location: mark one of %d locations as the default (NAME=URL,default)", len(s))
	case len(defs) > 1:
		return nil, fmt.Errorf("--location: %s are all marked default; mark one", strings.Join(defs, ", "))
	}
	slices.SortStableFunc(s, func(a, b Location) int {
		switch {
		case a.Default:
			return -1
		case b.Default:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return s, nil
}

// Default is the default location.
func (s Set) Default() Location { return s[0] }

// Named returns the location called name.
func (s Set) Named(name string) (Location, bool) {
	for _, l := range s {
		if l.Name == name {
			return l, true
		}
	}
	return Location{}, false
}

// ByURL returns the location at url (any spelling blobstore.Location
// accepts); "" is the default.
func (s Set) ByURL(url string) (Location, bool) {
	if url == "" {
		return s.Default(), true
	}
	u, err := blobstore.Location(url)
	if err != nil {
		return Location{}, false
	}
	for _, l := range s {
		if l.URL == u {
			return l, true
		}
	}
	return Location{}, false
}

package blobstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/lethehq/lethe/internal/termtext"
)

// ErrUnavailable is returned by Locations.Open for a location that cannot
// be opened or reached from here: a file:// folder that is gone, an s3://
// bucket without credentials or that does not answer.
var ErrUnavailable = errors.New("storage location unavailable")

// UnavailableError names a location that cannot be used, and why. It
// carries no credentials. errors.Is(err, ErrUnavailable) holds.
type UnavailableError struct {
	Location string
	Cause    string
}

func (e *UnavailableError) Error() string {
	return "storage location " + e.Location + " is unavailable: " + e.Cause
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// ErrUnknownLocation is returned by Locations.Open for a location that
// was not declared (Declare): Lethe opens, reads and deletes only in the
// locations it is configured with, whatever a catalog row names.
var ErrUnknownLocation = errors.New("storage location not configured")

// UnknownLocationError names a location that is not configured.
// errors.Is(err, ErrUnknownLocation) holds.
type UnknownLocationError struct {
	Location string
}

func (e *UnknownLocationError) Error() string {
	return "storage location " + termtext.Quote(e.Location) + " is not configured: Lethe opens only the locations it is given (--storage, --location); refusing to touch it"
}

// Is makes errors.Is(err, ErrUnknownLocation) true.
func (e *UnknownLocationError) Is(target error) bool { return target == ErrUnknownLocation }

// Location returns rawURL in the form Store.URL gives: no user info, a
// clean path, the query sorted. Two URLs of the same location compare
// equal whatever credentials or spelling they were written with. It never
// returns a password, not even in its error.
func Location(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return "", fmt.Errorf("blobstore: invalid storage URL: %w", err)
	}
	// Each form is built afresh from the parts that name the place, so
	// user info never makes it through.
	switch u.Scheme {
	case "file":
		if u.Path == "" {
			return "", fmt.Errorf("blobstore: file URL %q needs an absolute directory", u.String())
		}
		return (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Clean(u.Path))}).String(), nil
	case "s3":
		c := url.URL{Scheme: "s3", Host: u.Host, RawQuery: u.Query().Encode()}
		if p := path.Clean("/" + u.Path); p != "/" {
			c.Path = p
		}
		return c.String(), nil
	}
	return "", fmt.Errorf("blobstore: unsupported storage URL scheme %q; want file:// or s3://", u.Scheme)
}

// Locations opens backup storage locations by URL: the configured one
// (Default) and, on demand, the others that backups were registered in.
// Each is opened once; Close closes those it opened, not Default. Safe for
// concurrent use.
type Locations struct {
	def    Store
	defLoc string
	cfg    Config

	mu   sync.Mutex
	open map[string]Store
	// known are the declared locations (Declare), the default's included:
	// the only ones Open opens.
	known map[string]bool
	// ro are the read-only locations (see readonly.go).
	ro map[string]bool
	// creds are the locations with static credentials of their own
	// (SetCredentials).
	creds map[string][2]string
}

// NewLocations returns Locations around the configured store def. cfg
// (nil: the zero Config) applies to the other locations; it must not carry
// another location's static credentials: those are set per location
// (SetCredentials), or come from the environment (AWS_ACCESS_KEY_ID,
// shared config files, ...).
func NewLocations(def Store, cfg *Config) *Locations {
	l := &Locations{def: def, open: map[string]Store{}, known: map[string]bool{}}
	if cfg != nil {
		l.cfg = *cfg
	}
	if loc, err := Location(def.URL()); err == nil {
		l.defLoc = loc
	}
	return l
}

// Declare adds the location at url to those Open opens (a configured
// --location). The default needs no declaration.
func (l *Locations) Declare(url string) {
	loc, err := Location(url)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.known[loc] = true
}

// Known reports whether Open would open the location at url ("" is the
// default): the default, or a declared one.
func (l *Locations) Known(url string) bool {
	if url == "" {
		return true
	}
	loc, err := Location(url)
	if err != nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return loc == l.defLoc || l.known[loc]
}

// Default is the configured store.
func (l *Locations) Default() Store { return l.def }

// Open returns the store at location: Default when location is empty or
// names the same place. Another location must have been declared
// (Declare), or the error wraps ErrUnknownLocation and nothing is opened:
// a location comes from the configuration, never from a catalog row
// alone. It is opened with its own credentials (SetCredentials), else
// those of the environment, and must exist (a file:// folder) or answer
// (an s3:// bucket); otherwise the error wraps ErrUnavailable and names
// the location, without credentials.
func (l *Locations) Open(ctx context.Context, location string) (Store, error) {
	if location == "" {
		return l.def, nil
	}
	loc, err := Location(location)
	if err != nil {
		return nil, &UnavailableError{Location: "(invalid URL)", Cause: strings.TrimPrefix(err.Error(), "blobstore: ")}
	}
	if loc == l.defLoc {
		return l.def, nil
	}
	if !l.Known(loc) {
		return nil, &UnknownLocationError{Location: loc}
	}
	if u, err := url.Parse(loc); err == nil && u.Scheme == "file" {
		// Opening a file:// store creates its folder; a recorded one that
		// is gone must not come back empty, even if it was open before.
		if fi, err := os.Stat(filepath.FromSlash(u.Path)); err != nil || !fi.IsDir() {
			return nil, &UnavailableError{Location: loc, Cause: "the folder does not exist"}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.open[loc]; ok {
		return s, nil
	}
	cfg := l.cfg
	if c, ok := l.creds[loc]; ok {
		cfg.AccessKeyID, cfg.SecretAccessKey = c[0], c[1]
	}
	s, err := OpenConfig(ctx, loc, &cfg)
	if err != nil {
		return nil, &UnavailableError{Location: loc, Cause: oneLine(err)}
	}
	if st, ok := s.(*store); ok && st.kind == kindS3 {
		if ok, err := st.accessible(ctx); err != nil || !ok {
			_ = s.Close()
			cause := "the bucket does not exist"
			switch {
			case err != nil && strings.Contains(err.Error(), "credentials"):
				cause = "no credentials for it: give it a credentials-file, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment"
			case err != nil:
				cause = oneLine(err)
			}
			return nil, &UnavailableError{Location: loc, Cause: cause}
		}
	}
	l.open[loc] = s
	return s, nil
}

// SetCredentials gives the location at url static S3 credentials of its
// own (a location's credentials-file), used when Open opens it instead of
// the environment's. Set them before the location is first opened.
func (l *Locations) SetCredentials(url, accessKeyID, secretAccessKey string) {
	loc, err := Location(url)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.creds == nil {
		l.creds = map[string][2]string{}
	}
	l.creds[loc] = [2]string{accessKeyID, secretAccessKey}
}

// Close closes the locations Open opened (not Default).
func (l *Locations) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for k, s := range l.open {
		errs = append(errs, s.Close())
		delete(l.open, k)
	}
	return errors.Join(errs...)
}

// oneLine keeps the first line of an error, short: the AWS SDK's errors
// run over several lines and repeat the request.
func oneLine(err error) string {
	s := strings.TrimPrefix(err.Error(), "blobstore: ")
	for i, r := range s {
		if r == '\n' {
			s = s[:i]
			break
		}
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

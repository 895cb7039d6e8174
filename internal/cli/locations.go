package cli

import (
	"context"
	"strings"

	"github.com/spf13/pflag"

	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/storageloc"
)

// locationFlags are the named storage locations (--location).
type locationFlags struct {
	specs []string
	// set is resolved on first use (locationSet), once --storage has its
	// default.
	set storageloc.Set
}

func (l *locationFlags) add(pf *pflag.FlagSet) {
	pf.StringArrayVar(&l.specs, "location", nil, "a named backup storage location NAME=URL[,default][,readOnly][,credentials-file=FILE] (repeatable; env LETHE_LOCATIONS, one a line; credentials from FILE, an AWS credentials file of mode 0600, else from the environment); --storage URL is the shortcut for one location named default")
}

// resolve checks the declared locations; with some declared, --storage
// (which must not be given too) becomes the default one's URL.
func (l *locationFlags) resolve(getenv func(string) string, storage *string) error {
	if len(l.specs) == 0 {
		if v := getenv("LETHE_LOCATIONS"); v != "" {
			for _, line := range strings.Split(v, "\n") {
				if strings.TrimSpace(line) != "" {
					l.specs = append(l.specs, line)
				}
			}
		}
	}
	if len(l.specs) == 0 {
		return nil
	}
	set, err := storageloc.Resolve(l.specs, "", *storage != "")
	if err != nil {
		return usageError{err}
	}
	l.set = set
	*storage = set.Default().URL
	return nil
}

// locationSet is every declared location, the default first (with none
// declared, --storage as the one named default).
func (a *app) locationSet() (storageloc.Set, error) {
	if err := a.init(); err != nil {
		return nil, err
	}
	if a.g.locs.set == nil {
		set, err := storageloc.Resolve(nil, a.g.storage, false)
		if err != nil {
			return nil, usageError{err}
		}
		a.g.locs.set = set
	}
	return a.g.locs.set, nil
}

// storageLocations is the opener of every declared location, and of no
// other (a catalog row cannot name one), with the read-only ones marked:
// the deletion refuses them.
func (a *app) storageLocations(ctx context.Context) (*blobstore.Locations, error) {
	bl, err := a.storage(ctx)
	if err != nil {
		return nil, err
	}
	set, err := a.locationSet()
	if err != nil {
		return nil, err
	}
	if a.locations == nil {
		a.locations = blobstore.NewLocations(bl, nil)
	}
	for _, l := range set {
		a.locations.Declare(l.URL)
		if l.ReadOnly {
			a.locations.SetReadOnly(l.URL)
		}
		if c := l.Credentials; c != nil {
			a.locations.SetCredentials(l.URL, c.AccessKeyID, c.SecretAccessKey)
		}
	}
	return a.locations, nil
}

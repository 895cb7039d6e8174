package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/storageloc"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

func newLocationCmd(a *app) *cobra.Command {
	c := groupCmd(&cobra.Command{
		Use:     "location",
		Aliases: []string{"locations", "backup-location"},
		Short:   "Show the backup storage locations (--location, or --storage as the one named default)",
		Long: `Storage locations are declared with
--location NAME=URL[,default][,readOnly][,credentials-file=FILE]
(repeatable, or the config file's location: list); --storage URL is the
shortcut for one location named default. An s3:// location's credentials
come from its credentials-file, an AWS credentials file ([default] with
aws_access_key_id and aws_secret_access_key, as Velero's
credentials-velero) that only its owner may read or write (chmod 600),
else from the environment (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...); never
from the command line: a URL that carries them is refused.

list and get check each location now: Available when it answers, else
Unavailable with the error. They show how many backups of the catalog are
in it, and when a sync (lethe server, or lethe backup sync) last read it.
A read-only location is synced, but nothing is deleted from it. With
-o json|yaml they print kind LocationStatus (LocationStatusList), a
report and not a resource: the catalog's record of a location, which
apply takes back, is 'lethe get backupstoragelocation NAME'.`,
	})
	c.AddCommand(newLocationListCmd(a), newLocationGetCmd(a))
	return c
}

func newLocationListCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the storage locations with their phase, backups and last sync",
		Example: `  lethe location list
  lethe location list -o json`,
		Args: exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		set, err := a.locationSet()
		if err != nil {
			return err
		}
		views, err := a.locationViews(cmd.Context(), set)
		if err != nil {
			return err
		}
		return a.printLocations(*out, views)
	}
	return c
}

func newLocationGetCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "get NAME...",
		Short: "Show storage locations by name",
		Example: `  lethe location get default
  lethe location get default archive -o yaml`,
		Args: cobra.MinimumNArgs(1),
	}
	out := outputFlag(c, "table")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		set, err := a.locationSet()
		if err != nil {
			return err
		}
		var pick storageloc.Set
		for _, n := range args {
			l, ok := set.Named(n)
			if !ok {
				return exitCodeError{exitNotFound, fmt.Errorf("no storage location is named %s", termtext.Quote(n))}
			}
			pick = append(pick, l)
		}
		views, err := a.locationViews(cmd.Context(), pick)
		if err != nil {
			return err
		}
		if structured(*out) && len(views) == 1 {
			return printObject(a.s.Out, *out, view.LocationStatusKind, views[0])
		}
		return a.printLocations(*out, views)
	}
	return c
}

func (a *app) locationViews(ctx context.Context, set storageloc.Set) ([]*view.Location, error) {
	st, err := a.catalog(ctx)
	if err != nil {
		return nil, err
	}
	locs, err := a.storageLocations(ctx)
	if err != nil {
		return nil, err
	}
	all, err := a.locationSet()
	if err != nil {
		return nil, err
	}
	return view.Locations(ctx, st, locs, all, set)
}

func (a *app) printLocations(out string, views []*view.Location) error {
	if structured(out) {
		if views == nil {
			views = []*view.Location{}
		}
		return printList(a.s.Out, out, view.LocationStatusKind, views)
	}
	t := newTable(a.s.Out, "NAME", "PHASE", "URL", "ACCESS", "DEFAULT", "BACKUPS", "LAST SYNCED", "ERROR")
	for _, v := range views {
		access, def, synced := "ReadWrite", "", "never"
		if v.ReadOnly {
			access = "ReadOnly"
		}
		if v.Default {
			def = "yes"
		}
		if v.LastSyncTime != nil {
			synced = human(time.Since(*v.LastSyncTime)) + " ago"
		}
		t.row(termtext.Quote(v.Name), v.Phase, termtext.Quote(v.URL), access, def, fmt.Sprint(v.Backups), synced, termtext.Quote(v.LastError))
	}
	return t.flush()
}

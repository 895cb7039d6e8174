package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/view"
)

// BackupDescriptionKind is the kind of 'backup describe NAME --details'
// in JSON and YAML: the backup's object, as get prints it, and its
// details.
const BackupDescriptionKind = "BackupDescription"

type backupDescriptionView struct {
	Resource view.Object     `json:"resource"`
	Details  *backup.Details `json:"details"`
}

// describeBackupDetails prints 'backup describe NAME --details': v's
// description and its details, or a BackupDescription.
func (a *app) describeBackupDetails(ctx context.Context, v *view.Backup, format string) error {
	d, err := a.backupDetails(ctx, v)
	if err != nil {
		return err
	}
	if structured(format) {
		o, err := view.ToObject(backup.Kind, v.Object())
		if err != nil {
			return err
		}
		return printObject(a.s.Out, format, BackupDescriptionKind, backupDescriptionView{Resource: o, Details: d})
	}
	a.printBackup(v)
	printBackupDetails(a.s.Out, d)
	return nil
}

// backupDetails reads what --details adds to v's description: its
// tarball's resource list and its native volume snapshots from its
// location, and its deletion's outcomes (backup.ReadDetails).
func (a *app) backupDetails(ctx context.Context, v *view.Backup) (*backup.Details, error) {
	b, err := backup.FromResource(v.Resource)
	if err != nil {
		return nil, err
	}
	locs, err := a.storageLocations(ctx)
	if err != nil {
		return nil, err
	}
	bl, openErr := locs.Open(ctx, v.Spec.StorageLocation)
	return backup.ReadDetails(ctx, bl, openErr, b, v.Progress, v.Unsettled, backup.DefaultDetailNames), nil
}

// printBackupDetails prints d after a backup's description, as velero
// backup describe --details lays it out.
func printBackupDetails(w io.Writer, d *backup.Details) {
	fmt.Fprintln(w)
	switch {
	case d.ResourceListError != "":
		fmt.Fprintf(w, "Resource List:  <%s>\n", termtext.Quote(d.ResourceListError))
	case len(d.ResourceList) == 0:
		fmt.Fprintf(w, "Resource List:  <no items>\n")
	default:
		fmt.Fprintln(w, "Resource List:")
		for _, t := range d.ResourceList {
			fmt.Fprintf(w, "  %s (%s):\n", termtext.Quote(t.Key), counted(t.Count, "item", "items"))
			for _, n := range t.Names {
				fmt.Fprintf(w, "    - %s\n", termtext.Quote(n))
			}
			if t.More > 0 {
				fmt.Fprintf(w, "    … and %d more\n", t.More)
			}
		}
	}
	fmt.Fprintln(w)
	switch {
	case d.VolumeSnapshotsError != "":
		fmt.Fprintf(w, "Velero-Native Snapshots:  <%s>\n", termtext.Quote(d.VolumeSnapshotsError))
	case len(d.VolumeSnapshots) == 0:
		fmt.Fprintln(w, "Velero-Native Snapshots:  <none included>")
	default:
		fmt.Fprintln(w, "Velero-Native Snapshots:")
		for _, s := range d.VolumeSnapshots {
			fmt.Fprintf(w, "  %s:\n", termtext.Quote(s.Name))
			iops := "<N/A>"
			if s.IOPS != nil {
				iops = fmt.Sprint(*s.IOPS)
			}
			for _, f := range [][2]string{{"Snapshot ID", s.SnapshotID}, {"Type", s.Type}, {"Availability Zone", s.AvailabilityZone}, {"IOPS", iops}, {"Phase", s.Phase}} {
				v := f[1]
				if v == "" {
					v = "<N/A>"
				}
				fmt.Fprintf(w, "    %-19s %s\n", f[0]+":", termtext.Quote(v))
			}
		}
	}
	fmt.Fprintln(w)
	if len(d.PluginOutcomes) == 0 {
		fmt.Fprintln(w, "Plugin Outcomes:  <no deletion ran>")
		return
	}
	fmt.Fprintln(w, "Plugin Outcomes:")
	for _, p := range d.PluginOutcomes {
		fmt.Fprintf(w, "  %s: %d done, %d skipped, %d failed, %d blocked\n", termtext.Quote(p.Plugin), p.Done, p.Skipped, p.Failed, p.Blocked)
		for _, o := range p.Unsettled {
			fmt.Fprintf(w, "    %s (attempts %d)\n", outcomeText(o), o.Attempts)
		}
		if p.MoreUnsettled > 0 {
			fmt.Fprintf(w, "    … and %d more\n", p.MoreUnsettled)
		}
	}
}

package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/view"
)

// checkNameAndSelector refuses a NAME together with -l/--selector, as
// kubectl does: the selector would otherwise be silently ignored.
func checkNameAndSelector(hasName bool, selector string) error {
	if hasName && selector != "" {
		return usageError{errors.New("a NAME and -l/--selector cannot be given together: leave out NAME to select by label, or -l to show NAME")}
	}
	return nil
}

// backupGetMany is `backup get` with no name (it lists, as `backup list -l`)
// or with several (each is shown, in the order given), as `velero backup
// get` does. Every name is checked before anything is read; a name that
// is not in the catalog is reported after the others are shown (exit 4).
func (a *app) backupGetMany(cmd *cobra.Command, names []string, selector, out string) error {
	if len(names) == 0 {
		lc := newBackupListCmd(a)
		lc.SetContext(cmd.Context())
		if err := lc.Flags().Set("output", out); err != nil {
			return err
		}
		if err := lc.Flags().Set("selector", selector); err != nil {
			return err
		}
		return lc.RunE(lc, nil)
	}
	for _, n := range names {
		if err := backup.ValidateName(n); err != nil {
			return usageError{err}
		}
	}
	ctx := cmd.Context()
	st, err := a.catalog(ctx)
	if err != nil {
		return err
	}
	var views []*view.Backup
	var missing []error
	for _, n := range names {
		r, err := backup.Get(ctx, st, backup.Key(n))
		var nf *backup.NotFoundError
		if errors.As(err, &nf) {
			missing = append(missing, err)
			continue
		}
		if err != nil {
			return err
		}
		v, err := a.backupView(ctx, r, true)
		if err != nil {
			return err
		}
		views = append(views, v)
	}
	if structured(out) {
		if err := printList(a.s.Out, out, backup.Kind, view.BackupObjects(views)); err != nil {
			return err
		}
	} else {
		for i, v := range views {
			if i > 0 {
				fmt.Fprintln(a.s.Out)
			}
			a.printBackup(v)
		}
	}
	return errors.Join(missing...)
}

package deletion

import (
	"fmt"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/termtext"
)

// ReadOnlyError refuses the deletion of a backup whose storage location
// is declared read-only (--location NAME=URL,readOnly), as Velero refuses
// to delete from a ReadOnly BackupStorageLocation. Nothing changed.
type ReadOnlyError struct {
	Backup   string
	Location string
}

func (e *ReadOnlyError) Error() string {
	return fmt.Sprintf("backup %s is in the read-only storage location %s: nothing is deleted from it; nothing changed",
		e.Backup, termtext.Quote(e.Location))
}

// checkWritable refuses a request on, or a run of, a backup whose
// location is read-only.
func (d *Deleter) checkWritable(b *backup.Backup) error {
	if loc, ro := d.cfg.Locations.ReadOnly(b.Spec.StorageLocation); ro {
		return &ReadOnlyError{Backup: b.Name(), Location: loc}
	}
	return nil
}

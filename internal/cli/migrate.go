package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

func newMigrateCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Bring the catalog's schema up to this version of Lethe, and stop",
		Long: `Migrate applies the catalog's pending schema migrations and exits. Every
command does this on open when its role may change the schema; migrate is
for a PostgreSQL catalog run with two roles (docs/postgres.md): run it once
per upgrade with the owner role's address, then run Lethe with the runtime
role, which opens a current schema without changing it.`,
		Example: `  PGPASSFILE=/etc/lethe/owner.pgpass lethe migrate --store 'postgres://lethe_owner@db/lethe'`,
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := a.catalog(cmd.Context()); err != nil {
				return err
			}
			_, err := fmt.Fprintf(a.s.Out, "catalog %s: every migration is applied; the schema is current\n", termtext.Quote(catalog.RedactURL(a.g.store)))
			return err
		},
	}
}

package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/apitoken"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

// TokenKind is the kind of a token's JSON (lethe token list -o json).
const TokenKind = "APIToken"

// tokenView is a token as -o json|yaml shows it: never its secret nor
// its hash.
type tokenView struct {
	Name      string            `json:"name"`
	Role      catalog.TokenRole `json:"role"`
	CreatedAt time.Time         `json:"createdAt"`
	CreatedBy string            `json:"createdBy"`
	// Login: a console login (lethe console url), used at UsedAt.
	Login  bool       `json:"login,omitempty"`
	UsedAt *time.Time `json:"usedAt,omitempty"`
}

func newTokenView(t *catalog.Token) tokenView {
	return tokenView{Name: t.Name, Role: t.Role, CreatedAt: t.CreatedAt, CreatedBy: t.CreatedBy, Login: t.Login, UsedAt: t.UsedAt}
}

func newTokenCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke the API's bearer tokens",
		Long: `Tokens authenticate callers of the HTTP API that 'lethe server --api-addr'
serves (docs/api.md). A token has a role: a viewer reads; an operator also
writes (undelete, request a deletion, retry now, discard). The catalog keeps
only the SHA-256 of a token's secret: the secret is printed once, by
'lethe token create', and cannot be shown again. Creating and revoking a
token are audited (kind APIToken), and every write made with a token is
audited in its name (actor token:NAME).`,
		Example: `  lethe token create ci --role operator
  lethe token list
  lethe token revoke ci`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	c.AddCommand(newTokenCreateCmd(a), newTokenListCmd(a), newTokenRevokeCmd(a))
	return c
}

func newTokenCreateCmd(a *app) *cobra.Command {
	var role string
	c := &cobra.Command{
		Use:   "create NAME --role viewer|operator",
		Short: "Create a token and print its secret, once",
		Long: `Create makes a token named NAME with a role and prints its secret on
standard output, once: store it now (a secret manager, a 0600 file). The
catalog keeps only its SHA-256. A viewer reads; an operator also writes.
A name is taken until the token is revoked.`,
		Example: `  lethe token create ci --role operator
  lethe token create dashboards --role viewer > dashboards.token`,
		Args: exactArgs(1, "NAME"),
	}
	c.Flags().StringVar(&role, "role", "", "viewer (reads) or operator (reads and writes); required")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		r := catalog.TokenRole(role)
		if role == "" {
			return usageError{errors.New("--role is required: viewer (reads) or operator (reads and writes)")}
		}
		if !r.Valid() {
			return usageError{fmt.Errorf("--role %s: use viewer or operator", termtext.Quote(role))}
		}
		if err := catalog.ValidateTokenName(args[0]); err != nil {
			return usageError{err}
		}
		ctx := cmd.Context()
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		secret, t, err := apitoken.Create(ctx, st, args[0], r)
		if errors.Is(err, catalog.ErrAlreadyExists) {
			return fmt.Errorf("token %s already exists; revoke it first (lethe token revoke %s) or pick another name", args[0], args[0])
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(a.s.Out, secret)
		fmt.Fprintf(a.s.Err, "token %s created with role %s; its secret was written to standard output, once: store it now\n", t.Name, t.Role)
		return nil
	}
	return c
}

func newTokenListCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:     "list",
		Short:   "List the tokens (names and roles; never secrets)",
		Example: "  lethe token list\n  lethe token list -o json",
		Args:    exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		ctx := cmd.Context()
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		ts, err := st.ListTokens(ctx)
		if err != nil {
			return err
		}
		views := make([]tokenView, len(ts))
		for i, t := range ts {
			views[i] = newTokenView(t)
		}
		if structured(*out) {
			return printList(a.s.Out, *out, TokenKind, views)
		}
		if len(views) == 0 {
			fmt.Fprintln(a.s.Out, "No tokens.")
			return nil
		}
		tb := newTable(a.s.Out, "NAME", "ROLE", "CREATED", "CREATED BY", "TYPE")
		for _, v := range views {
			typ := "bearer"
			switch {
			case v.Login && v.UsedAt != nil:
				typ = "console login, used " + v.UsedAt.Format(time.RFC3339)
			case v.Login:
				typ = "console login, unused"
			}
			tb.row(v.Name, string(v.Role), v.CreatedAt.Format(time.RFC3339), termtext.Quote(v.CreatedBy), typ)
		}
		return tb.flush()
	}
	return c
}

func newTokenRevokeCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a token: it stops working at once",
		Long: `Revoke deletes the token: requests that carry it are refused (401) from
then on, and console sessions it opened end. It is audited.`,
		Example: "  lethe token revoke ci",
		Args:    exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := catalog.ValidateTokenName(args[0]); err != nil {
				return usageError{err}
			}
			ctx := cmd.Context()
			st, err := a.catalog(ctx)
			if err != nil {
				return err
			}
			t, err := st.RevokeToken(ctx, args[0])
			if errors.Is(err, catalog.ErrNotFound) {
				return exitCodeError{code: exitNotFound, err: fmt.Errorf("token %s not found (lethe token list)", args[0])}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.s.Out, "token %s (%s) revoked\n", t.Name, t.Role)
			return nil
		},
	}
}

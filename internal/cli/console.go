package cli

import (
	"errors"
	"fmt"
	"net"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/api"
	"github.com/lethehq/lethe/internal/apitoken"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

func newConsoleCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "console",
		Short: "Log in to the web console of lethe server --api-addr",
		Long: `The console is a few web pages served by 'lethe server --api-addr' on the
API's address: an overview, and the trash (what is Scheduled, with
Undelete). 'lethe console url' prints the URL that logs a browser in.`,
		Example: "  lethe console url --api-addr 127.0.0.1:8443 --role operator",
		Args:    exactArgs(0, ""),
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	c.AddCommand(newConsoleURLCmd(a))
	return c
}

func newConsoleURLCmd(a *app) *cobra.Command {
	var addr, role string
	var https bool
	c := &cobra.Command{
		Use:   "url --api-addr ADDR [--role viewer|operator]",
		Short: "Print a one-time URL that logs a browser in to the console",
		Long: `URL creates a console login with a role (audited, kind APIToken, named
console-...) and prints the URL that uses it: opened within 10 minutes, it
logs the browser in with a session cookie (HttpOnly, SameSite=Strict, and
Secure under TLS) and cannot be used again. 'lethe token revoke
console-...' ends the session. A viewer's console shows what an operator's
does, with its buttons disabled.`,
		Example: `  lethe console url --api-addr 127.0.0.1:8443
  lethe console url --api-addr lethe.example:8443 --https --role operator`,
		Args: exactArgs(0, ""),
	}
	c.Flags().StringVar(&addr, "api-addr", "", "the address lethe server --api-addr serves, e.g. 127.0.0.1:8443 (env LETHE_API_ADDR)")
	c.Flags().StringVar(&role, "role", string(catalog.TokenViewer), "viewer (reads) or operator (also undeletes)")
	c.Flags().BoolVar(&https, "https", false, "the server serves TLS (--api-tls-cert): print an https:// URL")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if addr == "" {
			addr = a.s.Getenv("LETHE_API_ADDR")
		}
		if addr == "" {
			return usageError{errors.New("--api-addr is required: the address lethe server --api-addr serves, e.g. 127.0.0.1:8443")}
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return usageError{fmt.Errorf("--api-addr %s: want HOST:PORT or :PORT", termtext.Quote(addr))}
		}
		if host == "" {
			host = api.AddrDefaultHost
		}
		r := catalog.TokenRole(role)
		if !r.Valid() {
			return usageError{fmt.Errorf("--role %s: use viewer or operator", termtext.Quote(role))}
		}
		ctx := cmd.Context()
		st, err := a.catalog(ctx)
		if err != nil {
			return err
		}
		secret, t, err := apitoken.CreateLogin(ctx, st, r)
		if err != nil {
			return err
		}
		u := url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: api.LoginPath, RawQuery: url.Values{"token": {secret}}.Encode()}
		if https {
			u.Scheme = "https"
		}
		fmt.Fprintln(a.s.Out, u.String())
		fmt.Fprintf(a.s.Err, "console login %s (%s): open the URL within %s; it works once\n", t.Name, t.Role, apitoken.LoginTTL)
		return nil
	}
	return c
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/federation"
	"github.com/lethehq/lethe/internal/server"
	"github.com/lethehq/lethe/internal/termtext"
)

// federationConfig is the --federation file, read and validated once;
// nil without the flag.
func (a *app) federationConfig() (*federation.Config, error) {
	if err := a.init(); err != nil {
		return nil, err
	}
	if a.g.federation == "" {
		return nil, nil
	}
	if a.fed == nil {
		c, err := federation.Load(a.g.federation)
		if err != nil {
			return nil, usageError{err}
		}
		a.fed = c
	}
	return a.fed, nil
}

// federationLoops are the loops of lethe server --federation: the
// PeerService on the listener ln (bound before anything starts) and the
// dispatcher of the peer outbox, which counts its attempts in m.
func (a *app) federationLoops(cfg *federation.Config, ln net.Listener, holder string, poll time.Duration, m *federation.Metrics) []server.Loop {
	srv := federation.NewServer(cfg, a.store)
	d := federation.NewDispatcher(cfg, a.store, holder)
	d.Metrics = m
	first := ln
	return []server.Loop{
		{Name: "peer service", Run: func(ctx context.Context) error {
			l := first
			first = nil
			if l == nil { // a restart: listen again
				var err error
				if l, err = net.Listen("tcp", cfg.Listen); err != nil {
					return err
				}
			}
			return srv.Serve(ctx, l)
		}},
		{Name: "peer outbox", Run: func(ctx context.Context) error {
			defer d.Close()
			return d.Run(ctx, poll)
		}},
	}
}

// kindPeer is the kind of a peer as -o json|yaml prints it.
const kindPeer = "Peer"

type peerView struct {
	Kind string `json:"kind"`
	federation.PeerStatus
}

func newPeerCmd(a *app) *cobra.Command {
	c := groupCmd(&cobra.Command{
		Use:   "peer",
		Short: "Show the other Lethe servers this one references resources on (--federation)",
		Long: `Peers are the other lethe servers named in the --federation file
(docs/federation.md). A manifest reference with peer: NAME points to a
resource on one of them; its peer keeps a back-reference that holds the
resource until the reference is gone.`,
	})
	c.AddCommand(newPeerListCmd(a), newPeerGetCmd(a))
	return c
}

// peerStatus is federation.Status for the --federation file.
func (a *app) peerStatus(ctx context.Context, probe bool, timeout time.Duration) ([]federation.PeerStatus, error) {
	if timeout <= 0 {
		return nil, usageError{fmt.Errorf("--timeout %s: must be positive", timeout)}
	}
	cfg, err := a.federationConfig()
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, usageError{errors.New("no peers: give the federation file with --federation FILE (or LETHE_FEDERATION)")}
	}
	st, err := a.catalog(ctx)
	if err != nil {
		return nil, err
	}
	return federation.Status(ctx, cfg, st, probe, timeout)
}

func newPeerGetCmd(a *app) *cobra.Command {
	var timeout time.Duration
	var noProbe bool
	c := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one peer: reachability, references each way, and the outbox",
		Long: `Get shows one peer as lethe peer list does (the columns are explained in
'lethe peer list --help'), with -o json|yaml a Peer. A name that the
--federation file does not name, and that the catalog holds nothing of,
is not found (exit 4).`,
		Example: `  lethe peer get eu --federation /etc/lethe/federation.yaml
  lethe peer get eu -o yaml`,
		Args: exactArgs(1, "NAME"),
	}
	out := outputFlag(c, "table")
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long the peer has to answer the Ping")
	c.Flags().BoolVar(&noProbe, "no-probe", false, "do not ask the peer; show only what the catalog holds")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		peers, err := a.peerStatus(cmd.Context(), !noProbe, timeout)
		if err != nil {
			return err
		}
		for _, p := range peers {
			if p.Name != args[0] {
				continue
			}
			if structured(*out) {
				return printObject(a.s.Out, *out, kindPeer, peerView{Kind: kindPeer, PeerStatus: p})
			}
			return a.peerTable([]federation.PeerStatus{p})
		}
		return exitCodeError{exitNotFound, fmt.Errorf("peer %s not found: the federation file does not name it and the catalog holds nothing of it", termtext.Quote(args[0]))}
	}
	return c
}

func newPeerListCmd(a *app) *cobra.Command {
	var timeout time.Duration
	var noProbe bool
	c := &cobra.Command{
		Use:   "list",
		Short: "List the peers: reachability, references each way, and the outbox",
		Long: `List shows every peer of the --federation file, and every peer the catalog
still holds something of:

  STATE        Reachable: it answered a Ping over mutual TLS with a
               certificate naming it, and its file names this one. Unreachable:
               no answer (ERROR says why); unknown, never absent.
               NotConfigured: not in the file any more. NotProbed: --no-probe.
  REFERENCES   this server's references to resources on it, acknowledged
               of all (pending and refused in -o json|yaml)
  BACK-REFS    the back-references this server holds for its resources
  PENDING      outbox messages to it not answered yet, and the age of the
               oldest
  LAST CONTACT when it last answered a message

It reads the catalog and asks the peers; it changes nothing. It needs the
--federation file, as lethe server does.`,
		Example: `  lethe peer list --federation /etc/lethe/federation.yaml
  lethe peer list -o json
  lethe peer list --no-probe`,
		Args: exactArgs(0, ""),
	}
	out := outputFlag(c, "table")
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long each peer has to answer the Ping")
	c.Flags().BoolVar(&noProbe, "no-probe", false, "do not ask the peers; show only what the catalog holds")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		peers, err := a.peerStatus(cmd.Context(), !noProbe, timeout)
		if err != nil {
			return err
		}
		if structured(*out) {
			views := make([]peerView, len(peers))
			for i, p := range peers {
				views[i] = peerView{Kind: kindPeer, PeerStatus: p}
			}
			return printList(a.s.Out, *out, kindPeer, views)
		}
		if len(peers) == 0 {
			fmt.Fprintln(a.s.Out, "The federation file names no peers, and the catalog holds nothing of any.")
			return nil
		}
		return a.peerTable(peers)
	}
	return c
}

func (a *app) peerTable(peers []federation.PeerStatus) error {
	now := time.Now()
	t := newTable(a.s.Out, "NAME", "ADDRESS", "ACCEPT", "STATE", "REFERENCES", "BACK-REFS", "PENDING", "LAST CONTACT", "ERROR")
	for _, p := range peers {
		pending := fmt.Sprint(p.PendingMessages)
		if p.OldestPending != nil {
			pending += " (oldest " + human(now.Sub(*p.OldestPending)) + ")"
		}
		contact := "never"
		if p.LastContact != nil {
			contact = human(now.Sub(*p.LastContact)) + " ago"
		}
		e := p.Error
		if e == "" {
			e = p.LastError
		}
		refs := p.References
		t.row(termtext.Quote(p.Name), dash(termtext.Quote(p.Address)), fmt.Sprint(p.Accept), p.State,
			fmt.Sprintf("%d/%d", refs.Acknowledged, refs.Pending+refs.Acknowledged+refs.Refused),
			fmt.Sprint(p.BackReferences), pending, contact, dash(termtext.Quote(e)))
	}
	return t.flush()
}

package federation

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/lethehq/lethe/internal/catalog"
	federationv1 "github.com/lethehq/lethe/proto/lethe/federation/v1"
)

// The states of a peer as PeerStatus shows it.
const (
	// StateReachable: the peer answered Ping over mutual TLS, with a
	// certificate naming it, and its configuration names this peer.
	StateReachable = "Reachable"
	// StateUnreachable: no answer (Error says why): unknown, never absent.
	StateUnreachable = "Unreachable"
	// StateNotConfigured: the catalog holds edges, stubs or messages of a
	// peer the configuration no longer names.
	StateNotConfigured = "NotConfigured"
	// StateNotProbed: reachability was not asked.
	StateNotProbed = "NotProbed"
)

// PeerStatus is one peer as this one sees it.
type PeerStatus struct {
	Name    string `json:"name"`
	Address string `json:"address,omitempty"`
	// Accept: this peer stores back-references from it.
	Accept bool   `json:"accept"`
	State  string `json:"state"`
	// Error is why a probe got no answer.
	Error string `json:"error,omitempty"`
	// References are this peer's forward edges to resources on it, by
	// state; BackReferences the stubs this peer holds for its referrers.
	References     EdgeCounts `json:"references"`
	BackReferences int        `json:"backReferences"`
	// PendingMessages are the outbox messages to it not answered yet;
	// OldestPending is when the oldest was queued.
	PendingMessages int        `json:"pendingMessages"`
	OldestPending   *time.Time `json:"oldestPending,omitempty"`
	// LastError is the last error of a pending message.
	LastError string `json:"lastError,omitempty"`
	// LastContact is when it last answered a message.
	LastContact *time.Time `json:"lastContact,omitempty"`
}

// EdgeCounts counts forward edges by state.
type EdgeCounts struct {
	Pending      int `json:"pending"`
	Acknowledged int `json:"acknowledged"`
	Refused      int `json:"refused"`
}

// Status reports every configured peer, and every peer the catalog still
// holds something of, by name. With probe, each configured peer is asked
// Ping (at most timeout each, all at once).
func Status(ctx context.Context, cfg *Config, store Store, probe bool, timeout time.Duration) ([]PeerStatus, error) {
	by := map[string]*PeerStatus{}
	get := func(name string) *PeerStatus {
		if p, ok := by[name]; ok {
			return p
		}
		p := &PeerStatus{Name: name, State: StateNotConfigured}
		by[name] = p
		return p
	}
	for _, p := range cfg.Peers {
		s := get(p.Name)
		s.Address, s.Accept, s.State = p.Address, p.Accept, StateNotProbed
	}
	edges, err := store.PeerReferences(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, e := range edges {
		c := &get(e.Peer).References
		switch e.State {
		case catalog.PeerEdgeAcknowledged:
			c.Acknowledged++
		case catalog.PeerEdgeRefused:
			c.Refused++
		default:
			c.Pending++
		}
	}
	stubs, err := store.BackReferences(ctx, catalog.Key{})
	if err != nil {
		return nil, err
	}
	for _, b := range stubs {
		get(b.Peer).BackReferences++
	}
	msgs, err := store.PeerMessages(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		s := get(m.Peer)
		switch m.State {
		case catalog.NotificationPending:
			s.PendingMessages++
			if s.OldestPending == nil || m.CreatedAt.Before(*s.OldestPending) {
				t := m.CreatedAt
				s.OldestPending = &t
			}
			if m.LastError != "" {
				s.LastError = clipReason(m.LastError)
			}
		case catalog.NotificationDelivered:
			if s.LastContact == nil || m.DeliveredAt.After(*s.LastContact) {
				t := m.DeliveredAt
				s.LastContact = &t
			}
		}
	}
	out := make([]PeerStatus, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b PeerStatus) int { return cmp.Compare(a.Name, b.Name) })
	if probe {
		var wg sync.WaitGroup
		for i := range out {
			p, ok := cfg.Peer(out[i].Name)
			if !ok {
				continue
			}
			wg.Add(1)
			go func(s *PeerStatus) {
				defer wg.Done()
				if err := Ping(ctx, cfg, p, timeout); err != nil {
					s.State, s.Error = StateUnreachable, clipReason(err.Error())
					return
				}
				s.State = StateReachable
			}(&out[i])
		}
		wg.Wait()
	}
	return out, nil
}

// Ping asks peer, over mutual TLS, whether it answers and knows this
// peer; nil is an answer that names it.
func Ping(ctx context.Context, cfg *Config, peer Peer, timeout time.Duration) error {
	tc, err := ClientTLS(cfg, peer.Name)
	if err != nil {
		return err
	}
	c, err := grpc.NewClient(peer.Address, grpc.WithTransportCredentials(credentials.NewTLS(tc)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)))
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := federationv1.NewPeerServiceClient(c).Ping(cctx, &federationv1.PingRequest{FromPeer: cfg.Name})
	if err != nil {
		return err
	}
	if resp.GetPeer() != peer.Name {
		return fmt.Errorf("it answers as peer %q", clipReason(resp.GetPeer()))
	}
	return nil
}

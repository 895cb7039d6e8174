package federation

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
	federationv1 "github.com/lethehq/lethe/proto/lethe/federation/v1"
)

// AddReference records a reference from a local resource to a resource on
// a configured peer: a forward edge, Pending until the peer acknowledges
// it, with its intent queued in the same transaction. A peer this
// configuration does not name is refused, and so is a reference the wire
// could not carry.
func AddReference(ctx context.Context, cfg *Config, store Store, ref catalog.PeerReference) (*catalog.PeerReference, error) {
	if _, ok := cfg.Peer(ref.Peer); !ok {
		return nil, fmt.Errorf("%w: peer %s is not configured", catalog.ErrInvalid, termtext.Quote(ref.Peer))
	}
	probe := ref
	probe.IdempotencyKey, probe.Referrer.UID = "probe", "probe"
	if _, err := registerRequest(cfg.Name, &probe); err != nil {
		return nil, fmt.Errorf("%w: %v", catalog.ErrInvalid, err)
	}
	return store.AddPeerReference(ctx, ref)
}

// Dispatcher drains the peer outbox: each message goes to its peer, and
// only the peer's answer moves its edge. No answer (the peer cannot be
// reached, refuses the connection or the caller) puts the message off
// with a growing backoff; the edge stays Pending, never Acknowledged.
type Dispatcher struct {
	cfg    *Config
	store  Store
	holder string
	// CallTimeout bounds each call (default 10s); Backoff gives the delay
	// before attempt n+1 (default: 1s doubling to 5m).
	CallTimeout time.Duration
	Backoff     func(attempts int) time.Duration
	// Metrics, when set, count each attempt by peer and answer.
	Metrics *Metrics

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewDispatcher returns a dispatcher that claims messages as holder.
func NewDispatcher(cfg *Config, store Store, holder string) *Dispatcher {
	return &Dispatcher{cfg: cfg, store: store, holder: holder, CallTimeout: 10 * time.Second, Backoff: backoff,
		conns: map[string]*grpc.ClientConn{}}
}

func backoff(attempts int) time.Duration {
	d := time.Second
	for range min(attempts, 20) {
		d *= 2
		if d >= 5*time.Minute {
			return 5 * time.Minute
		}
	}
	return d
}

// Close closes the connections to the peers.
func (d *Dispatcher) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for n, c := range d.conns {
		_ = c.Close()
		delete(d.conns, n)
	}
	return nil
}

func (d *Dispatcher) conn(peer Peer) (*grpc.ClientConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.conns[peer.Name]; ok {
		return c, nil
	}
	tc, err := ClientTLS(d.cfg, peer.Name)
	if err != nil {
		return nil, err
	}
	c, err := grpc.NewClient(peer.Address, grpc.WithTransportCredentials(credentials.NewTLS(tc)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)))
	if err != nil {
		return nil, err
	}
	d.conns[peer.Name] = c
	return c, nil
}

// RunOnce delivers the messages due now (at most limit) and returns how
// many got an answer.
func (d *Dispatcher) RunOnce(ctx context.Context, limit int) (int, error) {
	msgs, err := d.store.ClaimPeerMessages(ctx, d.holder, 2*d.CallTimeout, limit)
	if err != nil {
		return 0, err
	}
	answered := 0
	for _, m := range msgs {
		a, err := d.deliver(ctx, m)
		if err != nil {
			d.Metrics.observe(m.Peer, ResultUnanswered)
			next := time.Now().Add(d.Backoff(m.Attempts))
			if rerr := d.store.RetryPeerMessage(ctx, m.ID, m.Lease, next, err.Error()); rerr != nil {
				return answered, rerr
			}
			continue
		}
		if err := d.store.AnswerPeerMessage(ctx, m.ID, m.Lease, *a); err != nil {
			return answered, err
		}
		result := ResultAccepted
		if !a.Accepted {
			result = ResultRefused
		}
		d.Metrics.observe(m.Peer, result)
		answered++
	}
	return answered, nil
}

// deliver sends m and returns the peer's answer; an error means no answer.
func (d *Dispatcher) deliver(ctx context.Context, m *catalog.PeerMessage) (*catalog.PeerAnswer, error) {
	peer, ok := d.cfg.Peer(m.Peer)
	if !ok {
		return nil, fmt.Errorf("peer %s is not configured", termtext.Quote(m.Peer))
	}
	var ref catalog.PeerReference
	if err := json.Unmarshal(m.Body, &ref); err != nil {
		return nil, fmt.Errorf("message %d: corrupt body: %w", m.ID, err)
	}
	ref.IdempotencyKey = m.IdempotencyKey
	c, err := d.conn(peer)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, d.CallTimeout)
	defer cancel()
	client := federationv1.NewPeerServiceClient(c)
	switch m.Type {
	case catalog.PeerMsgRegisterBackReference:
		req, err := registerRequest(d.cfg.Name, &ref)
		if err != nil {
			return nil, err
		}
		resp, err := client.RegisterBackReference(cctx, req)
		if err != nil {
			return nil, fmt.Errorf("peer %s: %w", m.Peer, err)
		}
		return &catalog.PeerAnswer{Accepted: resp.GetAccepted(), Reason: clipReason(resp.GetReason())}, nil
	case catalog.PeerMsgDropBackReference:
		req, err := dropRequest(d.cfg.Name, &ref)
		if err != nil {
			return nil, err
		}
		// Dropped or gone already: either way the peer holds no stub for
		// it now.
		if _, err := client.DropBackReference(cctx, req); err != nil {
			return nil, fmt.Errorf("peer %s: %w", m.Peer, err)
		}
		return &catalog.PeerAnswer{Accepted: true}, nil
	}
	return nil, fmt.Errorf("message type %s is not implemented", termtext.Quote(string(m.Type)))
}

// Run delivers messages until ctx ends, looking again every poll.
func (d *Dispatcher) Run(ctx context.Context, poll time.Duration) error {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		for {
			n, err := d.RunOnce(ctx, 100)
			if err != nil && ctx.Err() == nil {
				return err
			}
			if n == 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

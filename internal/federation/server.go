package federation

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
	federationv1 "github.com/lethehq/lethe/proto/lethe/federation/v1"
)

// Store is what the federation needs of the catalog.
type Store interface {
	catalog.Federation
	Get(ctx context.Context, k catalog.Key) (*catalog.Resource, error)
}

// Server serves PeerService for one peer.
type Server struct {
	federationv1.UnimplementedPeerServiceServer
	cfg   *Config
	store Store
}

// NewServer returns the PeerService of the peer cfg describes.
func NewServer(cfg *Config, store Store) *Server { return &Server{cfg: cfg, store: store} }

// Serve serves PeerService on lis over mutual TLS until ctx ends.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	tc, err := ServerTLS(s.cfg)
	if err != nil {
		return err
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(tc)), grpc.MaxRecvMsgSize(MaxMessageBytes))
	federationv1.RegisterPeerServiceServer(g, s)
	go func() {
		<-ctx.Done()
		g.GracefulStop()
	}()
	return g.Serve(lis)
}

// authorize checks who calls: the verified client certificate must name
// the peer the request claims to be (from), and this peer's configuration
// must accept it. Either failure is PermissionDenied: no answer, so the
// caller's edge stays Pending.
func (s *Server) authorize(ctx context.Context, from string) error {
	if err := s.identify(ctx, from); err != nil {
		return err
	}
	if !s.cfg.Accepts(from) {
		return status.Errorf(codes.PermissionDenied, "peer %s does not accept back-references from peer %s",
			termtext.Quote(s.cfg.Name), termtext.Quote(from))
	}
	return nil
}

// identify checks that the verified client certificate names from, and
// that this peer's configuration names it (accepted or not).
func (s *Server) identify(ctx context.Context, from string) error {
	cert, err := callerCert(ctx)
	if err != nil {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	if !certNames(cert, from) {
		return status.Errorf(codes.PermissionDenied, "the client certificate does not name peer %s", termtext.Quote(from))
	}
	if _, ok := s.cfg.Peer(from); !ok {
		return status.Errorf(codes.PermissionDenied, "peer %s does not know peer %s", termtext.Quote(s.cfg.Name), termtext.Quote(from))
	}
	return nil
}

// RegisterBackReference implements PeerService: the stub is stored (or
// found, for a replay) and the answer is accepted; a target that does not
// exist or is being deleted is a refusal. A catalog that cannot be written
// is an error, never a refusal.
func (s *Server) RegisterBackReference(ctx context.Context, req *federationv1.RegisterBackReferenceRequest) (*federationv1.RegisterBackReferenceResponse, error) {
	if err := ValidateRegister(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.authorize(ctx, req.GetFromPeer()); err != nil {
		return nil, err
	}
	_, err := s.store.RegisterBackReference(ctx, backReference(req))
	switch {
	case err == nil:
		return &federationv1.RegisterBackReferenceResponse{Accepted: true}, nil
	case errors.Is(err, catalog.ErrNotFound), errors.Is(err, catalog.ErrInvalidTransition):
		return &federationv1.RegisterBackReferenceResponse{Reason: err.Error()}, nil
	case errors.Is(err, catalog.ErrInvalid):
		// The key was used for another stub: no answer, so the caller's
		// edge stays Pending rather than believe in a stub that is not.
		return nil, status.Error(codes.InvalidArgument, err.Error())
	default:
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("peer %s: %v", s.cfg.Name, err))
	}
}

// Ping implements PeerService: a peer this one's configuration names
// (accepted or not) gets its name.
func (s *Server) Ping(ctx context.Context, req *federationv1.PingRequest) (*federationv1.PingResponse, error) {
	if err := peerNameErr(req.GetFromPeer()); err != nil {
		return nil, status.Error(codes.InvalidArgument, "from_peer: "+err.Error())
	}
	if err := s.identify(ctx, req.GetFromPeer()); err != nil {
		return nil, err
	}
	return &federationv1.PingResponse{Peer: s.cfg.Name}, nil
}

// DropBackReference implements PeerService: the stub the caller
// registered under the key goes (a peer drops only its own stubs: the
// stub is looked up by the caller's name). A stub gone already is an
// answer too. The caller needs only to be named by this peer's
// configuration, accepted or not: dropping its own stub is never more
// than it was given.
func (s *Server) DropBackReference(ctx context.Context, req *federationv1.DropBackReferenceRequest) (*federationv1.DropBackReferenceResponse, error) {
	if err := ValidateDrop(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.identify(ctx, req.GetFromPeer()); err != nil {
		return nil, err
	}
	r, t := req.GetReferrer(), req.GetTarget()
	dropped, err := s.store.DropBackReference(ctx, catalog.BackReference{Peer: req.GetFromPeer(), IdempotencyKey: req.GetIdempotencyKey(),
		Referrer: catalog.ObjectRef{Kind: r.GetKind(), Namespace: r.GetNamespace(), Name: r.GetName(), UID: r.GetUid()},
		Target:   catalog.Key{Kind: t.GetKind(), Namespace: t.GetNamespace(), Name: t.GetName()}})
	switch {
	case err == nil:
		return &federationv1.DropBackReferenceResponse{Dropped: dropped}, nil
	case errors.Is(err, catalog.ErrInvalid):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	default:
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("peer %s: %v", s.cfg.Name, err))
	}
}

package federation_test

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/federation"
	federationv1 "github.com/lethehq/lethe/proto/lethe/federation/v1"
)

// trio is eu (the target's peer) naming us (accepted) and mallory
// (accepted or not), each with a certificate of its own from one CA.
type trio struct {
	pki         *pki
	eu          *node
	us, mallory *federation.Config
}

func newTrio(t *testing.T, malloryAccepted bool, malloryNames ...string) *trio {
	t.Helper()
	p := newPKI(t)
	if malloryNames == nil {
		malloryNames = []string{"mallory"}
	}
	euCert, euKey := p.issue(t, "eu", "eu")
	usCert, usKey := p.issue(t, "us", "us")
	mCert, mKey := p.issue(t, "mallory", malloryNames...)
	lis := listen(t)
	eu := &node{store: openStore(t, "sqlite"), addr: lis.Addr().String(), cfg: &federation.Config{
		Name: "eu", Listen: lis.Addr().String(), CAFile: p.caFile, CertFile: euCert, KeyFile: euKey,
		Peers: []federation.Peer{{Name: "us", Address: "127.0.0.1:1", Accept: true}, {Name: "mallory", Address: "127.0.0.1:1", Accept: malloryAccepted}}}}
	require.NoError(t, eu.cfg.Validate())
	serve(t, eu, lis)
	_, err := eu.store.Create(context.Background(), &catalog.Resource{Kind: "Database", Namespace: "shop", Name: "orders"})
	require.NoError(t, err)
	_, err = eu.store.Create(context.Background(), &catalog.Resource{Kind: "Database", Namespace: "shop", Name: "payments"})
	require.NoError(t, err)
	peers := []federation.Peer{{Name: "eu", Address: lis.Addr().String()}}
	return &trio{pki: p, eu: eu,
		us:      &federation.Config{Name: "us", CAFile: p.caFile, CertFile: usCert, KeyFile: usKey, Peers: peers},
		mallory: &federation.Config{Name: "mallory", CAFile: p.caFile, CertFile: mCert, KeyFile: mKey, Peers: peers}}
}

func (tr *trio) client(t *testing.T, as *federation.Config) federationv1.PeerServiceClient {
	t.Helper()
	tc, err := federation.ClientTLS(as, "eu")
	require.NoError(t, err)
	c, err := grpc.NewClient(tr.eu.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return federationv1.NewPeerServiceClient(c)
}

func (tr *trio) stubs(t *testing.T) []*catalog.BackReference {
	t.Helper()
	bs, err := tr.eu.store.BackReferences(context.Background(), catalog.Key{})
	require.NoError(t, err)
	return bs
}

// TestPeerCannotActForAnother: a peer with a valid certificate for its
// own name cannot register, drop or ping as another, and its drops find
// only its own stubs.
func TestPeerCannotActForAnother(t *testing.T) {
	tr := newTrio(t, true)
	ctx := context.Background()
	us, m := tr.client(t, tr.us), tr.client(t, tr.mallory)
	r := goodRequest()
	resp, err := us.RegisterBackReference(ctx, r)
	require.NoError(t, err)
	require.True(t, resp.GetAccepted())

	// mallory claims to be us.
	_, err = m.RegisterBackReference(ctx, goodRequest())
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = m.DropBackReference(ctx, &federationv1.DropBackReferenceRequest{FromPeer: "us", IdempotencyKey: r.IdempotencyKey, Referrer: r.Referrer, Target: r.Target})
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	// mallory as itself, with us's key: finds only its own stubs.
	d, err := m.DropBackReference(ctx, &federationv1.DropBackReferenceRequest{FromPeer: "mallory", IdempotencyKey: r.IdempotencyKey, Referrer: r.Referrer, Target: r.Target})
	require.NoError(t, err)
	assert.False(t, d.GetDropped())
	require.Len(t, tr.stubs(t), 1)
	assert.Equal(t, "us", tr.stubs(t)[0].Peer)
	// mallory registers with us's referrer UID: its own stub, named mallory.
	r2 := goodRequest()
	r2.FromPeer = "mallory"
	resp, err = m.RegisterBackReference(ctx, r2)
	require.NoError(t, err)
	assert.True(t, resp.GetAccepted())
	bs := tr.stubs(t)
	require.Len(t, bs, 2)
	// Ping as another.
	_, err = m.Ping(ctx, &federationv1.PingRequest{FromPeer: "us"})
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
}

// TestUnacceptedPeerStoresNoStub: a peer eu names without accept gets
// PermissionDenied.
func TestUnacceptedPeerStoresNoStub(t *testing.T) {
	tr := newTrio(t, false)
	r := goodRequest()
	r.FromPeer = "mallory"
	_, err := tr.client(t, tr.mallory).RegisterBackReference(context.Background(), r)
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	assert.Empty(t, tr.stubs(t))
}

// TestCallerWithoutCertificateStoresNothing: no client certificate, or no
// TLS at all, reaches no handler.
func TestCallerWithoutCertificateStoresNothing(t *testing.T) {
	tr := newTrio(t, true)
	tc, err := federation.ClientTLS(tr.us, "eu")
	require.NoError(t, err)
	tc.Certificates = nil
	c, err := grpc.NewClient(tr.eu.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	require.NoError(t, err)
	defer c.Close()
	_, err = federationv1.NewPeerServiceClient(c).RegisterBackReference(context.Background(), goodRequest())
	assert.Error(t, err)
	// A plain-text connection.
	conn, err := net.Dial("tcp", tr.eu.addr)
	require.NoError(t, err)
	_, _ = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	_ = conn.Close()
	assert.Empty(t, tr.stubs(t))
}

// TestIdempotencyKeyReusedForAnotherStubIsRefused: a key names one stub;
// sent again with another target it is no replay. Answering it accepted
// would acknowledge an edge whose target holds no stub, so the target
// could be deleted under the referrer: it is InvalidArgument (no answer,
// the caller's edge stays Pending) and stores nothing.
func TestIdempotencyKeyReusedForAnotherStubIsRefused(t *testing.T) {
	tr := newTrio(t, true)
	ctx := context.Background()
	us := tr.client(t, tr.us)
	resp, err := us.RegisterBackReference(ctx, goodRequest())
	require.NoError(t, err)
	require.True(t, resp.GetAccepted())
	r := goodRequest()
	r.Target.Name = "payments"
	resp, err = us.RegisterBackReference(ctx, r)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "accepted=%v: %v", resp.GetAccepted(), err)
	assert.Contains(t, err.Error(), "names the back-reference from")
	bs := tr.stubs(t)
	require.Len(t, bs, 1)
	assert.Equal(t, "orders", bs[0].Target.Name)
	resp, err = us.RegisterBackReference(ctx, goodRequest())
	require.NoError(t, err, "the true replay is still answered")
	assert.True(t, resp.GetAccepted())
}

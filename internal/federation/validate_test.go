package federation_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/federation"
	federationv1 "github.com/lethehq/lethe/proto/lethe/federation/v1"
)

func goodRequest() *federationv1.RegisterBackReferenceRequest {
	return &federationv1.RegisterBackReferenceRequest{FromPeer: "us", IdempotencyKey: "0123abcd",
		Referrer:       &federationv1.ObjectRef{Kind: "App", Namespace: "shop", Name: "web", Uid: "0190-aa"},
		Target:         &federationv1.ObjectRef{Kind: "Database", Namespace: "shop", Name: "orders"},
		OnTargetDelete: federationv1.OnTargetDelete_ON_TARGET_DELETE_BLOCK}
}

var badRequests = map[string]func(r *federationv1.RegisterBackReferenceRequest){
	// Every known field is bounded on its own: only fields this version
	// does not know can make a message large.
	"oversized": func(r *federationv1.RegisterBackReferenceRequest) {
		r.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), make([]byte, federation.MaxMessageBytes)))
	},
	"no from_peer":             func(r *federationv1.RegisterBackReferenceRequest) { r.FromPeer = "" },
	"peer not a DNS name":      func(r *federationv1.RegisterBackReferenceRequest) { r.FromPeer = "US_EAST" },
	"no idempotency key":       func(r *federationv1.RegisterBackReferenceRequest) { r.IdempotencyKey = "" },
	"key with a slash":         func(r *federationv1.RegisterBackReferenceRequest) { r.IdempotencyKey = "a/b" },
	"no referrer":              func(r *federationv1.RegisterBackReferenceRequest) { r.Referrer = nil },
	"referrer without uid":     func(r *federationv1.RegisterBackReferenceRequest) { r.Referrer.Uid = "" },
	"lower-case kind":          func(r *federationv1.RegisterBackReferenceRequest) { r.Target.Kind = "database" },
	"name with a control byte": func(r *federationv1.RegisterBackReferenceRequest) { r.Target.Name = "orders\x1b[2J" },
	"bad namespace":            func(r *federationv1.RegisterBackReferenceRequest) { r.Target.Namespace = "Shop" },
	"target with a uid":        func(r *federationv1.RegisterBackReferenceRequest) { r.Target.Uid = "x" },
	"unspecified policy":       func(r *federationv1.RegisterBackReferenceRequest) { r.OnTargetDelete = 0 },
	"unknown policy":           func(r *federationv1.RegisterBackReferenceRequest) { r.OnTargetDelete = 9 },
}

func TestPeerMessagesAreBoundedAndValidated(t *testing.T) {
	require.NoError(t, federation.ValidateRegister(goodRequest()))
	for name, mutate := range badRequests {
		r := goodRequest()
		mutate(r)
		err := federation.ValidateRegister(r)
		require.Error(t, err, name)
		assert.NotContains(t, err.Error(), "\n", name)
		assert.NotContains(t, err.Error(), "\x1b", "%s: text from a peer is quoted", name)
	}
}

// call sends req to eu's PeerService as us (us's certificate).
func call(t *testing.T, w *world, req *federationv1.RegisterBackReferenceRequest) (*federationv1.RegisterBackReferenceResponse, error) {
	t.Helper()
	tc, err := federation.ClientTLS(w.us.cfg, "eu")
	require.NoError(t, err)
	c, err := grpc.NewClient(w.eu.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	require.NoError(t, err)
	defer c.Close()
	return federationv1.NewPeerServiceClient(c).RegisterBackReference(context.Background(), req)
}

func TestPeerServiceRefusesAnInvalidMessageAndStoresNothing(t *testing.T) {
	w := newWorld(t, worldOpts{targetDriver: "sqlite", euAccepts: true})
	for name, mutate := range badRequests {
		r := goodRequest()
		mutate(r)
		_, err := call(t, w, r)
		if proto.Size(r) > federation.MaxMessageBytes {
			assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%s: %v", name, err)
		} else {
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", name, err)
		}
	}
	assert.Empty(t, w.stubs(t))
}

func TestReplayedRegistrationStoresOneStub(t *testing.T) {
	w := newWorld(t, worldOpts{targetDriver: "sqlite", euAccepts: true})
	for range 3 {
		resp, err := call(t, w, goodRequest())
		require.NoError(t, err)
		assert.True(t, resp.GetAccepted())
	}
	require.Len(t, w.stubs(t), 1)
	es, err := w.eu.store.ListAudit(context.Background(), catalog.AuditFilter{Kind: "Database", Name: "orders"})
	require.NoError(t, err)
	assert.Len(t, es, 2, "create and one back-reference: a replay writes nothing")
}

func TestConfigRefusesABadFieldByName(t *testing.T) {
	good := func() *federation.Config {
		return &federation.Config{Name: "us", Listen: "127.0.0.1:7443", CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem",
			Peers: []federation.Peer{{Name: "eu", Address: "eu.example:7443", Accept: true}}}
	}
	require.NoError(t, good().Validate())
	for want, mutate := range map[string]func(c *federation.Config){
		"federation.name":             func(c *federation.Config) { c.Name = "" },
		"federation.listen":           func(c *federation.Config) { c.Listen = "7443" },
		"federation.caFile":           func(c *federation.Config) { c.CAFile = "" },
		"federation.peers[0].name":    func(c *federation.Config) { c.Peers[0].Name = "us" },
		"federation.peers[1].name":    func(c *federation.Config) { c.Peers = append(c.Peers, c.Peers[0]) },
		"federation.peers[0].address": func(c *federation.Config) { c.Peers[0].Address = "eu" },
	} {
		c := good()
		mutate(c)
		err := c.Validate()
		require.Error(t, err, want)
		assert.True(t, strings.HasPrefix(err.Error(), want+":"), "%s: %v", want, err)
	}
}

func TestDropMessagesAreBoundedAndValidated(t *testing.T) {
	good := func() *federationv1.DropBackReferenceRequest {
		g := goodRequest()
		return &federationv1.DropBackReferenceRequest{FromPeer: g.FromPeer, IdempotencyKey: g.IdempotencyKey, Referrer: g.Referrer, Target: g.Target}
	}
	require.NoError(t, federation.ValidateDrop(good()))
	bad := map[string]func(r *federationv1.DropBackReferenceRequest){
		"oversized": func(r *federationv1.DropBackReferenceRequest) {
			r.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), make([]byte, federation.MaxMessageBytes)))
		},
		"peer not a DNS name":  func(r *federationv1.DropBackReferenceRequest) { r.FromPeer = "US_EAST" },
		"key with a slash":     func(r *federationv1.DropBackReferenceRequest) { r.IdempotencyKey = "a/b" },
		"referrer without uid": func(r *federationv1.DropBackReferenceRequest) { r.Referrer.Uid = "" },
		"target with a uid":    func(r *federationv1.DropBackReferenceRequest) { r.Target.Uid = "x" },
		"name with a control":  func(r *federationv1.DropBackReferenceRequest) { r.Target.Name = "orders\x1b[2J" },
	}
	for name, mutate := range bad {
		r := good()
		mutate(r)
		err := federation.ValidateDrop(r)
		require.Error(t, err, name)
		assert.NotContains(t, err.Error(), "\n", name)
		assert.NotContains(t, err.Error(), "\x1b", "%s: text from a peer is quoted", name)
	}
}

package federation_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
	"github.com/lethehq/lethe/internal/federation"
)

// Two peers in one process, each with its own catalog and its own
// PeerService on a loopback port, talking gRPC over mutual TLS.

// openStore opens a fresh catalog: a SQLite file, or a PostgreSQL schema
// of its own (skipped without LETHE_TEST_POSTGRES_URL).
func openStore(t *testing.T, driver string) catalog.Store {
	t.Helper()
	ctx := context.Background()
	switch driver {
	case "sqlite":
		st, err := drivers.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "c.db"), &catalog.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	case "postgres":
		url := os.Getenv("LETHE_TEST_POSTGRES_URL")
		if url == "" {
			t.Skip("PostgreSQL tests are off: set LETHE_TEST_POSTGRES_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
		}
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		schema := "lethe_fed_" + hex.EncodeToString(b)
		t.Cleanup(func() {
			conn, err := pgx.Connect(context.Background(), url)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			_, err = conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
			require.NoError(t, err)
		})
		st, err := drivers.Open(ctx, url, &catalog.Config{Schema: schema})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	t.Fatalf("driver %q", driver)
	return nil
}

// onPairs runs f with the referrer's peer on SQLite and the target's peer
// on each driver.
func onPairs(t *testing.T, f func(t *testing.T, targetDriver string)) {
	for _, d := range []string{"sqlite", "postgres"} {
		t.Run("target-on-"+d, func(t *testing.T) { f(t, d) })
	}
}

type node struct {
	cfg   *federation.Config
	store catalog.Store
	addr  string
}

// listen reserves a loopback port for a peer.
func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return lis
}

// serve starts n's PeerService on lis until the test ends.
func serve(t *testing.T, n *node, lis net.Listener) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- federation.NewServer(n.cfg, n.store).Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("PeerService of %s: %v", n.cfg.Name, err)
		}
	})
}

// world is peer "us" (the referrer's, SQLite) and peer "eu" (the
// target's), with certificates from one CA. usCert is the certificate us
// presents; euCert the one eu presents; euAccepts is eu's half of the
// double opt-in.
type world struct {
	pki    *pki
	us, eu *node
	euLis  net.Listener
}

type worldOpts struct {
	targetDriver string
	usCertNames  []string // default: us
	euCertNames  []string // default: eu
	euAccepts    bool
	euDown       bool // eu's PeerService is not started
}

func newWorld(t *testing.T, o worldOpts) *world {
	t.Helper()
	p := newPKI(t)
	if o.usCertNames == nil {
		o.usCertNames = []string{"us"}
	}
	if o.euCertNames == nil {
		o.euCertNames = []string{"eu"}
	}
	usCert, usKey := p.issue(t, "us", o.usCertNames...)
	euCert, euKey := p.issue(t, "eu", o.euCertNames...)
	euLis, usLis := listen(t), listen(t)
	w := &world{pki: p, euLis: euLis}
	w.us = &node{store: openStore(t, "sqlite"), addr: usLis.Addr().String(), cfg: &federation.Config{
		Name: "us", Listen: usLis.Addr().String(), CAFile: p.caFile, CertFile: usCert, KeyFile: usKey,
		Peers: []federation.Peer{{Name: "eu", Address: euLis.Addr().String()}}}}
	w.eu = &node{store: openStore(t, o.targetDriver), addr: euLis.Addr().String(), cfg: &federation.Config{
		Name: "eu", Listen: euLis.Addr().String(), CAFile: p.caFile, CertFile: euCert, KeyFile: euKey,
		Peers: []federation.Peer{{Name: "us", Address: usLis.Addr().String(), Accept: o.euAccepts}}}}
	require.NoError(t, w.us.cfg.Validate())
	require.NoError(t, w.eu.cfg.Validate())
	serve(t, w.us, usLis)
	if !o.euDown {
		serve(t, w.eu, euLis)
	}
	ctx := context.Background()
	_, err := w.us.store.Create(ctx, &catalog.Resource{Kind: "App", Namespace: "shop", Name: "web"})
	require.NoError(t, err)
	_, err = w.eu.store.Create(ctx, &catalog.Resource{Kind: "Database", Namespace: "shop", Name: "orders"})
	require.NoError(t, err)
	return w
}

// reference adds App shop/web on us → Database shop/orders on eu.
func (w *world) reference(t *testing.T, name string) *catalog.PeerReference {
	t.Helper()
	ref, err := federation.AddReference(catalog.WithActor(context.Background(), "tester"), w.us.cfg, w.us.store, catalog.PeerReference{
		Referrer: catalog.ObjectRef{Kind: "App", Namespace: "shop", Name: "web"}, Peer: "eu",
		Target: catalog.Key{Kind: "Database", Namespace: "shop", Name: name}, OnTargetDelete: catalog.RefCascade})
	require.NoError(t, err)
	require.Equal(t, catalog.PeerEdgePending, ref.State)
	return ref
}

// dispatch runs one pass of us's dispatcher, retrying at once.
func (w *world) dispatch(t *testing.T) int {
	t.Helper()
	d := federation.NewDispatcher(w.us.cfg, w.us.store, "us-1")
	d.CallTimeout = 2 * time.Second
	d.Backoff = func(int) time.Duration { return 0 }
	defer d.Close()
	n, err := d.RunOnce(context.Background(), 10)
	require.NoError(t, err)
	return n
}

func (w *world) edge(t *testing.T) *catalog.PeerReference {
	t.Helper()
	es, err := w.us.store.PeerReferences(context.Background(), "")
	require.NoError(t, err)
	require.Len(t, es, 1)
	return es[0]
}

func (w *world) stubs(t *testing.T) []*catalog.BackReference {
	t.Helper()
	bs, err := w.eu.store.BackReferences(context.Background(), catalog.Key{})
	require.NoError(t, err)
	return bs
}

func (w *world) lastError(t *testing.T) string {
	t.Helper()
	ms, err := w.us.store.PeerMessages(context.Background(), "eu")
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, catalog.NotificationPending, ms[0].State, "an unanswered message stays pending")
	return ms[0].LastError
}

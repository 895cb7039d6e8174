package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Federation through the real binaries: two lethe servers, each on its
// own SQLite catalog, talking the peer protocol over mutual TLS with
// certificates made here, as an operator would provide them.

// testCA is a certificate authority that writes PEM files.
type testCA struct {
	dir    string
	file   string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lethe e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	ca := &testCA{dir: t.TempDir(), cert: cert, key: key, serial: 1}
	ca.file = filepath.Join(ca.dir, "ca.pem")
	writePEMFile(t, ca.file, "CERTIFICATE", der)
	return ca
}

func writePEMFile(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}

// issue writes a certificate naming dnsName, and its key.
func (ca *testCA) issue(t *testing.T, dnsName string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: dnsName},
		DNSNames: []string{dnsName}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(ca.dir, dnsName+".pem"), filepath.Join(ca.dir, dnsName+"-key.pem")
	writePEMFile(t, certFile, "CERTIFICATE", der)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	writePEMFile(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

// fedPeer is one lethe installation with its federation file.
type fedPeer struct {
	*env
	name, listen, file string
	metrics            string // the --metrics-addr of its last server
}

// newFedPeer writes name's federation file: its own listen address, the
// certificate of certName (name, unless it is an impostor), and peers
// (name=address[,accept]).
func newFedPeer(t *testing.T, ca *testCA, name, certName, listen string, peers ...string) *fedPeer {
	t.Helper()
	e := newEnv(t)
	cert, key := ca.issue(t, certName)
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nlisten: %s\ncaFile: %s\ncertFile: %s\nkeyFile: %s\npeers:\n", name, listen, ca.file, cert, key)
	for _, p := range peers {
		n, rest, _ := strings.Cut(p, "=")
		addr, accept, _ := strings.Cut(rest, ",")
		fmt.Fprintf(&b, "  - name: %s\n    address: %s\n    accept: %v\n", n, addr, accept == "accept")
	}
	file := filepath.Join(e.home, "federation.yaml")
	require.NoError(t, os.WriteFile(file, []byte(b.String()), 0o600))
	return &fedPeer{env: e, name: name, listen: listen, file: file}
}

// applyDoc applies one manifest from a file.
func (p *fedPeer) apply(t *testing.T, doc string) result {
	t.Helper()
	f := filepath.Join(p.dir, fmt.Sprintf("m%d.yaml", time.Now().UnixNano()))
	require.NoError(t, os.WriteFile(f, []byte(doc), 0o600))
	return p.run("apply", "-f", f, "--federation", p.file)
}

type peerJSON struct {
	Name       string `json:"name"`
	State      string `json:"state"`
	Error      string `json:"error"`
	References struct {
		Pending, Acknowledged, Refused int
	} `json:"references"`
	BackReferences  int    `json:"backReferences"`
	PendingMessages int    `json:"pendingMessages"`
	LastError       string `json:"lastError"`
}

// peers is lethe peer list -o json, by peer name.
func (p *fedPeer) peers(t *testing.T, probe bool) map[string]peerJSON {
	t.Helper()
	args := []string{"peer", "list", "-o", "json", "--federation", p.file, "--timeout", "3s"}
	if !probe {
		args = append(args, "--no-probe")
	}
	r := p.ok(args...)
	var l struct {
		Kind  string     `json:"kind"`
		Items []peerJSON `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &l), "%s", r)
	require.Equal(t, "PeerList", l.Kind)
	out := map[string]peerJSON{}
	for _, it := range l.Items {
		out[it.Name] = it
	}
	return out
}

func (p *fedPeer) server(t *testing.T) *proc {
	t.Helper()
	p.metrics = freePort(t)
	return p.startLong(5*time.Minute, "server", "--no-plugins", "--federation", p.file, "--metrics-addr", p.metrics, "--poll-interval", "100ms")
}

// fedEventually polls cond every 200ms for up to 30s.
func fedEventually(t *testing.T, what string, cond func() bool, servers ...*proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			for _, s := range servers {
				if s.exited() {
					t.Logf("server exited: %s", s.wait(t))
				}
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

const ordersDB = "kind: Database\nmetadata: {name: orders, namespace: shop}\n"

func webApp(peer, policy string) string {
	return fmt.Sprintf("kind: App\nmetadata: {name: web, namespace: shop}\nreferences:\n- {kind: Database, namespace: shop, name: orders, peer: %s, onTargetDelete: %s}\n", peer, policy)
}

// TestPeerReferenceRegistersABackReferenceAcrossServers: a manifest
// reference with peer: on us becomes a forward edge there, and, once both
// servers run, a back-reference on eu that holds its target; lethe peer
// list on each side shows the edge, the stub and the peer reachable.
func TestPeerReferenceRegistersABackReferenceAcrossServers(t *testing.T) {
	ca := newTestCA(t)
	usAddr, euAddr := freePort(t), freePort(t)
	us := newFedPeer(t, ca, "us", "us", usAddr, "eu="+euAddr)
	eu := newFedPeer(t, ca, "eu", "eu", euAddr, "us="+usAddr+",accept")

	r := eu.apply(t, ordersDB)
	require.Equal(t, 0, r.code, "%s", r)
	r = us.apply(t, webApp("eu", "block"))
	require.Equal(t, 0, r.code, "%s", r)

	// Nothing has been sent yet: the edge is Pending, its intent queued.
	p := us.peers(t, false)["eu"]
	require.Equal(t, 1, p.References.Pending, "%+v", p)
	require.Equal(t, 1, p.PendingMessages, "%+v", p)
	require.Equal(t, "NotProbed", p.State)
	// Applying again adds no second edge nor message.
	r = us.apply(t, webApp("eu", "block"))
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, 1, us.peers(t, false)["eu"].PendingMessages)
	// The same reference with another policy is refused, nothing changed.
	r = us.apply(t, webApp("eu", "cascade"))
	require.Equal(t, 1, r.code, "%s", r)
	requireOneErrorLine(t, r, "references[0].onTargetDelete: Database/shop/orders on peer eu is referenced with onTargetDelete block already")

	usSrv, euSrv := us.server(t), eu.server(t)
	fedEventually(t, "the edge on us to be Acknowledged", func() bool {
		p := us.peers(t, true)["eu"]
		return p.References.Acknowledged == 1 && p.PendingMessages == 0 && p.State == "Reachable"
	}, usSrv, euSrv)
	e := eu.peers(t, true)["us"]
	require.Equal(t, 1, e.BackReferences, "%+v", e)
	require.Equal(t, "Reachable", e.State, "%+v", e)
	// Each side's /metrics says the same, per peer.
	fedEventually(t, "the accepted message counted", func() bool {
		return scrapeMetric(t, us.metrics, `lethe_peer_messages_total{peer="eu",result="accepted"}`) == 1
	}, usSrv)
	require.Equal(t, 0.0, scrapeMetric(t, us.metrics, `lethe_peer_outbox_pending{peer="eu"}`))
	require.Equal(t, 1.0, scrapeMetric(t, us.metrics, `lethe_peer_references{peer="eu",state="acknowledged"}`))
	require.Equal(t, 1.0, scrapeMetric(t, eu.metrics, `lethe_peer_back_references{peer="us"}`))

	// The stub holds its target on eu: a direct delete is refused, naming
	// the remote referrer.
	r = eu.run("delete", "Database", "orders", "-n", "shop", "--yes")
	require.NotEqual(t, 0, r.code, "%s", r)
	require.Contains(t, r.stderr, "App/shop/web")
	require.Contains(t, r.stderr, "on peer us")
	eu.ok("get", "Database", "orders", "-n", "shop")

	// Table output names both counts.
	r = us.ok("peer", "list", "--federation", us.file)
	require.Regexp(t, `(?m)^eu\s+127\.0\.0\.1:\d+\s+false\s+Reachable\s+1/1\s+0\s+0\s`, r.stdout)

	// The referrer is deleted and purged on us while eu is down: no answer
	// is no drop, the message waits with its error, and the stub holds.
	require.NoError(t, euSrv.cmd.Process.Signal(os.Interrupt))
	euSrv.wait(t)
	us.ok("delete", "App", "web", "-n", "shop", "--yes", "--wait")
	fedEventually(t, "a failed attempt to tell eu", func() bool {
		p := us.peers(t, false)["eu"]
		return p.PendingMessages == 1 && p.LastError != ""
	}, usSrv)
	require.Equal(t, 1.0, scrapeMetric(t, us.metrics, `lethe_peer_outbox_pending{peer="eu"}`))
	require.GreaterOrEqual(t, scrapeMetric(t, us.metrics, `lethe_peer_messages_total{peer="eu",result="unanswered"}`), 1.0)
	require.Positive(t, scrapeMetric(t, us.metrics, `lethe_peer_outbox_oldest_pending_seconds{peer="eu"}`))
	require.Equal(t, 1, eu.peers(t, false)["us"].BackReferences, "eu was not told")
	r = eu.run("delete", "Database", "orders", "-n", "shop", "--yes")
	require.NotEqual(t, 0, r.code, "%s", r)

	// eu is back: it is told with no one's help, drops the stub, and its
	// resource can be deleted.
	euSrv = eu.server(t)
	fedEventually(t, "the back-reference on eu to be dropped", func() bool {
		return eu.peers(t, false)["us"].BackReferences == 0
	}, usSrv, euSrv)
	p = us.peers(t, false)["eu"]
	require.Equal(t, 0, p.References.Acknowledged+p.References.Pending, "%+v", p)
	require.Equal(t, 0, p.PendingMessages, "%+v", p)
	r = eu.ok("audit", "--kind", "Database", "-o", "json")
	require.Contains(t, r.stdout, `"back-reference-dropped"`)
	require.Contains(t, r.stdout, `"peer:us"`)
	eu.ok("delete", "Database", "orders", "-n", "shop", "--yes", "--wait")
	r = eu.run("get", "Database", "orders", "-n", "shop")
	require.NotEqual(t, 0, r.code, "purged: %s", r)
}

// TestPeerReferenceIsValidatedAtEntry: a reference to a peer the
// configuration does not name, or without any configuration, or with a
// peer name that is no DNS name, is refused with one line, nothing written.
func TestPeerReferenceIsValidatedAtEntry(t *testing.T) {
	ca := newTestCA(t)
	us := newFedPeer(t, ca, "us", "us", freePort(t), "eu="+freePort(t))

	r := us.apply(t, webApp("asia", "block"))
	require.Equal(t, 1, r.code, "%s", r)
	requireOneErrorLine(t, r, `references[0].peer: peer asia is not configured`)

	f := filepath.Join(us.dir, "web.yaml")
	require.NoError(t, os.WriteFile(f, []byte(webApp("eu", "block")), 0o600))
	r = us.run("apply", "-f", f)
	require.Equal(t, 1, r.code, "%s", r)
	requireOneErrorLine(t, r, `references[0].peer: peer eu is not configured`)

	r = us.apply(t, webApp("EU_1", "block"))
	require.Equal(t, 1, r.code, "%s", r)
	requireOneErrorLine(t, r, `references[0].peer: invalid peer name "EU_1"`)

	r = us.run("get", "App", "web", "-n", "shop")
	require.NotEqual(t, 0, r.code, "nothing was created: %s", r)
	require.Empty(t, us.peers(t, false)["eu"].PendingMessages)

	// peer get: one Peer; a name nothing knows is not found.
	r = us.ok("peer", "get", "eu", "-o", "yaml", "--no-probe", "--federation", us.file)
	require.Contains(t, r.stdout, "kind: Peer\n")
	require.Contains(t, r.stdout, "name: eu\n")
	r = us.run("peer", "get", "asia", "--no-probe", "--federation", us.file)
	require.Equal(t, 4, r.code, "%s", r)
	requireOneErrorLine(t, r, `peer asia not found`)

	// The server binds the peer listen address before anything starts:
	// one in use stops it with one line.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	taken := newFedPeer(t, ca, "us", "us", ln.Addr().String(), "eu="+freePort(t))
	r = taken.run("server", "--no-plugins", "--federation", taken.file, "--metrics-addr", freePort(t))
	require.Equal(t, 1, r.code, "%s", r)
	requireOneErrorLine(t, r, "federation: listen "+ln.Addr().String())

	// A federation file that is not valid stops the command.
	bad := filepath.Join(us.dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("name: us\nlisten: nowhere\n"), 0o600))
	r = us.run("peer", "list", "--federation", bad)
	require.Equal(t, 2, r.code, "%s", r)
	requireOneErrorLine(t, r, `federation.listen: "nowhere" is not host:port`)
}

// TestImpostorPeerGetsNoBackReference: a server that calls itself us but
// presents mallory's certificate is refused by eu; its edge stays Pending
// with the refusal as the last error, and eu stores nothing.
func TestImpostorPeerGetsNoBackReference(t *testing.T) {
	ca := newTestCA(t)
	usAddr, euAddr := freePort(t), freePort(t)
	us := newFedPeer(t, ca, "us", "mallory", usAddr, "eu="+euAddr)
	eu := newFedPeer(t, ca, "eu", "eu", euAddr, "us="+usAddr+",accept")
	require.Equal(t, 0, eu.apply(t, ordersDB).code)
	r := us.apply(t, webApp("eu", "block"))
	require.Equal(t, 0, r.code, "%s", r)
	usSrv, euSrv := us.server(t), eu.server(t)
	fedEventually(t, "a refused delivery on us", func() bool {
		return strings.Contains(us.peers(t, false)["eu"].LastError, `does not name peer`)
	}, usSrv, euSrv)
	p := us.peers(t, true)["eu"]
	require.Equal(t, 1, p.References.Pending, "%+v", p)
	require.Equal(t, "Unreachable", p.State, "%+v", p)
	require.Equal(t, 0, eu.peers(t, false)["us"].BackReferences)

	// A peer with a good certificate that eu's file does not name gets no
	// answer either, not even to Ping.
	asia := newFedPeer(t, ca, "asia", "asia", freePort(t), "eu="+euAddr)
	a := asia.peers(t, true)["eu"]
	require.Equal(t, "Unreachable", a.State, "%+v", a)
	require.Contains(t, a.Error, `peer eu does not know peer asia`)
}

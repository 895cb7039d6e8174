package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lethe-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	return certFile, keyFile
}

// TestAPIAddress: a non-loopback --api-addr without TLS is refused with
// one line before anything starts; with a certificate the API serves TLS.
func TestAPIAddress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cert, key := selfSigned(t)
	for _, tc := range []struct {
		args     []string
		contains string
	}{
		{[]string{"--api-addr", "0.0.0.0:8443"}, "--api-addr 0.0.0.0:8443 is not a loopback address"},
		{[]string{"--api-addr", "192.0.2.1:8443"}, "is not a loopback address"},
		{[]string{"--api-addr", "8443"}, "want HOST:PORT or :PORT"},
		{[]string{"--api-addr", "127.0.0.1:0", "--api-tls-cert", cert}, "--api-tls-cert and --api-tls-key go together"},
		{[]string{"--api-tls-cert", cert, "--api-tls-key", key}, "need --api-addr"},
		{[]string{"--api-addr", "127.0.0.1:0", "--api-tls-cert", key, "--api-tls-key", cert}, "--api-tls-cert/--api-tls-key"},
	} {
		r := e.run(append([]string{"server", "--no-plugins"}, tc.args...)...)
		require.Equal(t, 2, r.code, "%s", r)
		requireOneErrorLine(t, r, tc.contains)
	}

	addr := freePort(t)
	p := e.start("server", "--no-plugins", "--api-addr", addr, "--api-tls-cert", cert, "--api-tls-key", key)
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(cert)
	require.NoError(t, err)
	require.True(t, pool.AppendCertsFromPEM(pem))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if p.exited() {
			t.Fatalf("lethe server exited: %s", p.wait(t))
		}
		resp, err := client.Get("https://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "the API never answered over TLS: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := client.Get("https://" + addr + "/api/v1/whoami")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	// Under TLS the console's session cookie is Secure.
	u := strings.TrimSpace(e.ok("console", "url", "--api-addr", addr, "--https").stdout)
	require.True(t, strings.HasPrefix(u, "https://"+addr+"/login?token="), u)
	b := newBrowser(t, client)
	b.login(u, true)
	require.Equal(t, http.StatusOK, b.do("GET", "https://"+addr+"/trash", nil).code)
	// A plain request to the TLS port never reaches the API.
	if r, err := http.Get("http://" + addr + "/api/v1/whoami"); err == nil {
		r.Body.Close()
		require.NotEqual(t, http.StatusUnauthorized, r.StatusCode)
	}
}

package plugin

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// MTLSFDEnv is the environment variable that names the inherited file
// descriptor (a pipe) from which a plugin process reads its one-time TLS
// material for Lethe's automatic mTLS. The variable holds only a number;
// the key itself never enters the environment, so it is not in
// /proc/<pid>/environ of the plugin nor of anything the plugin starts.
//
// Lethe's automatic mTLS works like go-plugin's AutoMTLS (a one-time
// certificate on each side), with two differences:
//
//   - P-256 keys instead of P-521: on a small machine P-521 costs tens of
//     milliseconds per process start, which breaks the plugin start budget;
//   - each side pins the other's exact certificate bytes (VerifyConnection),
//     and the host generates both, so the plugin's handshake line cannot
//     substitute a certificate of its own (a sixth field is refused).
//
// What it protects: another user of the machine cannot talk to a plugin,
// nor pose as one. That boundary is really the socket folder, which only
// Lethe's user can enter (mode 0700); mTLS adds that a connection is to
// and from the exact processes Lethe started. Against a process of the
// same user it protects nothing: such a process can read the pipe, the
// plugin's memory or the host's, or write the handshake line first. Run
// plugins under their own user (lethe server --plugin-user) to separate
// them from Lethe.
const MTLSFDEnv = "LETHE_PLUGIN_MTLS_FD"

// mtlsMaxBytes caps what a plugin reads from the descriptor.
const mtlsMaxBytes = 64 << 10

type mtlsBundle struct {
	ServerCert string `json:"server_cert"`
	ServerKey  string `json:"server_key"`
	ClientCert string `json:"client_cert"`
}

// HostMTLS is the host side of Lethe's automatic mTLS: one client
// certificate for the host's lifetime, and a fresh server certificate for
// each plugin process.
type HostMTLS struct {
	client    tls.Certificate
	clientPEM []byte
	clientDER []byte
}

// NewHostMTLS generates the host's one-time client certificate.
func NewHostMTLS() (*HostMTLS, error) {
	certPEM, keyPEM, err := generateCert()
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return &HostMTLS{client: cert, clientPEM: certPEM, clientDER: cert.Certificate[0]}, nil
}

// PluginMTLS is the TLS material of one plugin process, host side.
type PluginMTLS struct {
	// Config is the TLS configuration the host dials the plugin with:
	// TLS 1.3 only, the host's client certificate, and the plugin's exact
	// certificate pinned.
	Config *tls.Config

	roots  *x509.CertPool // Config.RootCAs as made, to tell if it was replaced
	bundle []byte
	r      *os.File
}

// ForPlugin generates a plugin process's server certificate and the pipe
// that will carry it, with its key, to the process. Call Attach on the
// command, start it, then Close.
func (h *HostMTLS) ForPlugin() (*PluginMTLS, error) {
	certPEM, keyPEM, err := generateCert()
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, errors.New("mtls: bad server certificate")
	}
	serverDER := block.Bytes
	leaf, err := x509.ParseCertificate(serverDER)
	if err != nil {
		return nil, fmt.Errorf("mtls: server certificate: %w", err)
	}
	data, err := json.Marshal(mtlsBundle{ServerCert: string(certPEM), ServerKey: string(keyPEM), ClientCert: string(h.clientPEM)})
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &PluginMTLS{
		Config: &tls.Config{
			Certificates:     []tls.Certificate{h.client},
			RootCAs:          pool,
			ServerName:       "localhost",
			MinVersion:       tls.VersionTLS13,
			VerifyConnection: pinPeer("plugin", serverDER),
		},
		roots:  pool,
		bundle: data,
	}, nil
}

// Attach hands the material to cmd: the read end of a pipe that holds it
// goes to cmd.ExtraFiles, and MTLSFDEnv=<its descriptor number> is
// appended to cmd.Env. Call it after every other change to cmd.Env and
// cmd.ExtraFiles, and Close once the process started (or failed to).
func (m *PluginMTLS) Attach(cmd *exec.Cmd) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	// The bundle (about 1.5 KiB) fits the pipe's buffer: this does not block.
	if _, err := w.Write(m.bundle); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("mtls: %w", err)
	}
	if err := w.Close(); err != nil {
		r.Close()
		return fmt.Errorf("mtls: %w", err)
	}
	m.r = r
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	cmd.Env = append(cmd.Env, MTLSFDEnv+"="+strconv.Itoa(fd))
	return nil
}

// Close closes the host's copy of the pipe.
func (m *PluginMTLS) Close() error {
	if m.r == nil {
		return nil
	}
	err := m.r.Close()
	m.r = nil
	return err
}

// ErrHandshakeCertificate is returned by CheckHandshake when the plugin's
// handshake line carried a certificate of its own.
var ErrHandshakeCertificate = errors.New("the plugin's handshake line carries a certificate of its own (a sixth field); Lethe pins the certificate it made for the plugin and refuses any other")

// CheckHandshake reports ErrHandshakeCertificate when go-plugin replaced
// the pinned certificate pool with a certificate from the plugin's
// handshake line (its sixth field, go-plugin's AutoMTLS). Call it after
// the go-plugin client started, before dialing. The pin (VerifyConnection)
// would refuse the connection anyway; this names the cause.
func (m *PluginMTLS) CheckHandshake() error {
	if m.Config.RootCAs != m.roots {
		return ErrHandshakeCertificate
	}
	return nil
}

// pinPeer returns a VerifyConnection that accepts only a peer whose leaf
// certificate is exactly want.
func pinPeer(who string, want []byte) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("mtls: the %s presented no certificate", who)
		}
		if !bytes.Equal(cs.PeerCertificates[0].Raw, want) {
			return fmt.Errorf("mtls: the %s presented a certificate other than the one Lethe made for it", who)
		}
		return nil
	}
}

// serverTLS is the plugin side: the TLS configuration read from the
// descriptor MTLSFDEnv names, or nil when the host did not ask for TLS
// (go-plugin then serves in clear, or negotiates its own AutoMTLS). The
// descriptor is closed once read, so children never inherit it.
func serverTLS() (*tls.Config, error) {
	raw := os.Getenv(MTLSFDEnv)
	if raw == "" {
		return nil, nil
	}
	_ = os.Unsetenv(MTLSFDEnv)
	fd, err := strconv.Atoi(raw)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("mtls: %s=%q is not an inherited descriptor number", MTLSFDEnv, raw)
	}
	syscall.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), "lethe-mtls")
	data, err := io.ReadAll(io.LimitReader(f, mtlsMaxBytes))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("mtls: reading descriptor %d: %w", fd, err)
	}
	return parseServerTLS(data)
}

func parseServerTLS(data []byte) (*tls.Config, error) {
	var b mtlsBundle
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("mtls: %s: %w", MTLSFDEnv, err)
	}
	cert, err := tls.X509KeyPair([]byte(b.ServerCert), []byte(b.ServerKey))
	if err != nil {
		return nil, fmt.Errorf("mtls: server certificate: %w", err)
	}
	block, _ := pem.Decode([]byte(b.ClientCert))
	if block == nil {
		return nil, errors.New("mtls: bad client certificate")
	}
	client, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("mtls: client certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(client)
	return &tls.Config{
		Certificates:     []tls.Certificate{cert},
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        pool,
		MinVersion:       tls.VersionTLS13,
		VerifyConnection: pinPeer("host", client.Raw),
	}, nil
}

// generateCert makes a one-time self-signed P-256 certificate for
// "localhost", usable by either side. It is not a CA: it can sign no other
// certificate, and each side pins it byte for byte.
func generateCert() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "localhost", Organization: []string{"Lethe plugin"}},
		DNSNames:              []string{"localhost"},
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		SerialNumber:          sn,
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

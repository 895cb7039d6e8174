package plugin

import (
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
	"math/big"
	"os"
	"time"
)

// MTLSEnv is the environment variable through which the host hands a
// plugin process its one-time TLS material for Lethe's automatic mTLS.
//
// Lethe's automatic mTLS works like go-plugin's AutoMTLS (a one-time
// certificate on each side, each side trusting only the other's), with
// P-256 keys instead of P-521: on a small machine P-521 costs tens of
// milliseconds per process start, which breaks the plugin start budget.
// The host generates both certificates; the plugin's key reaches it through
// its environment, which only its own user can read.
const MTLSEnv = "LETHE_PLUGIN_MTLS"

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
	return &HostMTLS{client: cert, clientPEM: certPEM}, nil
}

// ForPlugin generates a plugin process's server certificate. It returns
// the MTLSEnv entry ("LETHE_PLUGIN_MTLS=…") for the process's environment
// and the TLS configuration the host dials it with.
func (h *HostMTLS) ForPlugin() (envEntry string, cfg *tls.Config, err error) {
	certPEM, keyPEM, err := generateCert()
	if err != nil {
		return "", nil, err
	}
	data, err := json.Marshal(mtlsBundle{ServerCert: string(certPEM), ServerKey: string(keyPEM), ClientCert: string(h.clientPEM)})
	if err != nil {
		return "", nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		return "", nil, errors.New("mtls: bad server certificate")
	}
	return MTLSEnv + "=" + string(data), &tls.Config{
		Certificates: []tls.Certificate{h.client},
		RootCAs:      pool,
		ServerName:   "localhost",
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// serverTLS is the plugin side: the TLS configuration from MTLSEnv, or nil
// when the host did not ask for TLS (go-plugin then serves in clear, or
// negotiates its own AutoMTLS).
func serverTLS() (*tls.Config, error) {
	raw := os.Getenv(MTLSEnv)
	if raw == "" {
		return nil, nil
	}
	_ = os.Unsetenv(MTLSEnv) // keep the key out of children's environments
	var b mtlsBundle
	if err := json.Unmarshal([]byte(raw), &b); err != nil {
		return nil, fmt.Errorf("mtls: %s: %w", MTLSEnv, err)
	}
	cert, err := tls.X509KeyPair([]byte(b.ServerCert), []byte(b.ServerKey))
	if err != nil {
		return nil, fmt.Errorf("mtls: server certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(b.ClientCert)) {
		return nil, errors.New("mtls: bad client certificate")
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// generateCert makes a one-time self-signed P-256 certificate for
// "localhost", usable by either side.
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
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
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

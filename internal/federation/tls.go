package federation

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"

	"context"
	"google.golang.org/grpc/credentials"
	grpcpeer "google.golang.org/grpc/peer"
)

// Mutual TLS between peers. Both sides present a certificate signed by
// the federation's CA. The caller checks the callee's certificate against
// the peer name it dials (ServerName); the callee checks that the caller's
// certificate names the peer the request claims to come from.

func loadTLS(c *Config) (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("federation: certificate %s: %w", c.CertFile, err)
	}
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("federation: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("federation: CA %s holds no PEM certificate", c.CAFile)
	}
	return cert, pool, nil
}

// ServerTLS is the TLS configuration PeerService listens with: a client
// certificate signed by the CA is required.
func ServerTLS(c *Config) (*tls.Config, error) {
	cert, pool, err := loadTLS(c)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}, nil
}

// ClientTLS is the TLS configuration for dialling peer: its certificate
// must be signed by the CA and name peer.
func ClientTLS(c *Config, peer string) (*tls.Config, error) {
	cert, pool, err := loadTLS(c)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: peer, MinVersion: tls.VersionTLS13}, nil
}

// errNoClientCert: the connection carries no verified client certificate.
var errNoClientCert = errors.New("no verified client certificate")

// callerCert returns the verified leaf certificate of the caller of ctx.
func callerCert(ctx context.Context) (*x509.Certificate, error) {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return nil, errNoClientCert
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil, errNoClientCert
	}
	return info.State.VerifiedChains[0][0], nil
}

// certNames says whether cert carries name as a DNS subject alternative
// name, exactly (a wildcard names no peer).
func certNames(cert *x509.Certificate, name string) bool {
	return slices.Contains(cert.DNSNames, name)
}

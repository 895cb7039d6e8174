package api

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// AddrDefaultHost is the host of an --api-addr given as a port only
// (":8443"): the API is loopback-only unless told otherwise.
const AddrDefaultHost = "127.0.0.1"

// ListenConfig is how the API address is bound.
type ListenConfig struct {
	// Addr is host:port; a missing host is AddrDefaultHost.
	Addr string
	// CertFile and KeyFile, together, serve TLS. Without them, only a
	// loopback address is accepted.
	CertFile, KeyFile string
}

// loopback reports whether host names only this machine.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// Listen checks cfg and binds it: a host-less address is loopback, a
// non-loopback one needs TLS. Its errors are one line, naming the flag.
func Listen(cfg ListenConfig) (net.Listener, error) {
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("--api-addr %q: want HOST:PORT or :PORT, e.g. 127.0.0.1:8443", cfg.Addr)
	}
	if host == "" {
		host = AddrDefaultHost
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("--api-tls-cert and --api-tls-key go together: give both, or neither")
	}
	withTLS := cfg.CertFile != ""
	if !withTLS && !loopback(host) {
		return nil, fmt.Errorf("--api-addr %s is not a loopback address: serving tokens in clear text to the network is refused; give --api-tls-cert and --api-tls-key, or bind 127.0.0.1", net.JoinHostPort(host, port))
	}
	var tc *tls.Config
	if withTLS {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--api-tls-cert/--api-tls-key: %w", err)
		}
		tc = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err
		}
		return nil, fmt.Errorf("--api-addr %s: %w", net.JoinHostPort(host, port), err)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	return ln, nil
}

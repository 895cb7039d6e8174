package plugin

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tlsPair is one plugin's material on both sides, as the host makes it.
func tlsPair(t *testing.T, h *HostMTLS) (host *PluginMTLS, server *tls.Config) {
	t.Helper()
	m, err := h.ForPlugin()
	require.NoError(t, err)
	server, err = parseServerTLS(m.bundle)
	require.NoError(t, err)
	return m, server
}

// handshake runs a real TLS handshake over loopback TCP and returns the
// client's and the server's errors.
func handshake(t *testing.T, server, client *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		if err := tc.Handshake(); err != nil {
			done <- err
			return
		}
		// TLS 1.3: the client's certificate is checked after the client's
		// handshake returns; a read surfaces the server's verdict.
		_, err = tc.Write([]byte("x"))
		done <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	tc := tls.Client(c, client)
	clientErr = tc.Handshake()
	if clientErr == nil {
		_, clientErr = io.ReadFull(tc, make([]byte, 1))
	}
	tc.Close()
	return clientErr, <-done
}

func TestMTLSPinning(t *testing.T) {
	h, err := NewHostMTLS()
	require.NoError(t, err)
	host, server := tlsPair(t, h)

	t.Run("the host it was made for connects", func(t *testing.T) {
		cerr, serr := handshake(t, server, host.Config)
		require.NoError(t, cerr)
		require.NoError(t, serr)
	})
	t.Run("a client without a certificate is refused", func(t *testing.T) {
		c := host.Config.Clone()
		c.Certificates = nil
		_, serr := handshake(t, server, c)
		require.Error(t, serr)
		require.Contains(t, serr.Error(), "certificate")
	})
	t.Run("a client with another certificate is refused", func(t *testing.T) {
		other, err := NewHostMTLS()
		require.NoError(t, err)
		c := host.Config.Clone()
		c.Certificates = []tls.Certificate{other.client}
		_, serr := handshake(t, server, c)
		require.Error(t, serr)
	})
	t.Run("TLS 1.2 is refused", func(t *testing.T) {
		c := host.Config.Clone()
		c.MinVersion, c.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
		cerr, serr := handshake(t, server, c)
		require.Error(t, cerr)
		require.Error(t, serr)
		require.Contains(t, serr.Error(), "version")
	})
	t.Run("the host refuses a server with another certificate", func(t *testing.T) {
		_, otherServer := tlsPair(t, h) // made by the same host, for another plugin
		cerr, _ := handshake(t, otherServer, host.Config)
		require.Error(t, cerr)
	})
	t.Run("the host refuses a server certificate that chains to the pinned one", func(t *testing.T) {
		// Even with the pool that go-plugin's sixth field would install,
		// VerifyConnection accepts only the exact bytes.
		_, otherServer := tlsPair(t, h)
		c := host.Config.Clone()
		pool := x509.NewCertPool()
		leaf, err := x509.ParseCertificate(otherServer.Certificates[0].Certificate[0])
		require.NoError(t, err)
		pool.AddCert(leaf)
		c.RootCAs = pool
		cerr, _ := handshake(t, otherServer, c)
		require.Error(t, cerr)
		require.Contains(t, cerr.Error(), "other than the one Lethe made")
	})
}

func TestMTLSCheckHandshake(t *testing.T) {
	h, err := NewHostMTLS()
	require.NoError(t, err)
	m, err := h.ForPlugin()
	require.NoError(t, err)
	require.NoError(t, m.CheckHandshake())
	m.Config.RootCAs = x509.NewCertPool() // what go-plugin's loadServerCert does
	require.True(t, errors.Is(m.CheckHandshake(), ErrHandshakeCertificate))
}

func TestMTLSAttachUsesADescriptorNotTheEnvironment(t *testing.T) {
	h, err := NewHostMTLS()
	require.NoError(t, err)
	m, err := h.ForPlugin()
	require.NoError(t, err)
	// A child reads its descriptor, as the SDK does, and prints its
	// environment: the key arrives, and is not in the environment.
	cmd := exec.Command("sh", "-c", `cat <&"$`+MTLSFDEnv+`"; echo; echo ENV; env`)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	require.NoError(t, m.Attach(cmd))
	out, err := cmd.Output()
	require.NoError(t, m.Close())
	require.NoError(t, err)
	data, env, ok := strings.Cut(string(out), "\nENV\n")
	require.True(t, ok)
	_, err = parseServerTLS([]byte(data))
	require.NoError(t, err, "the child read the material from the descriptor")
	require.Contains(t, env, MTLSFDEnv+"=3")
	require.NotContains(t, env, "PRIVATE KEY")
}

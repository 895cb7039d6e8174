package api

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestListenRefusesTheNetworkWithoutTLS(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", "192.0.2.1:0", "example.com:0"} {
		_, err := Listen(ListenConfig{Addr: addr})
		require.Error(t, err, addr)
		assert.Contains(t, err.Error(), "is not a loopback address", addr)
	}
	for _, addr := range []string{"127.0.0.1:0", ":0", "[::1]:0", "localhost:0"} {
		ln, err := Listen(ListenConfig{Addr: addr})
		if addr == "[::1]:0" && err != nil {
			continue // no IPv6 loopback on this machine
		}
		require.NoError(t, err, addr)
		ln.Close()
	}
	ln, err := Listen(ListenConfig{Addr: ":0"})
	require.NoError(t, err)
	defer ln.Close()
	assert.Contains(t, ln.Addr().String(), "127.0.0.1:", "a port alone is loopback")
}

func TestLoopbackHost(t *testing.T) {
	for h, want := range map[string]bool{
		"127.0.0.1:8443": true, "127.0.0.1": true, "localhost:8443": true, "LocalHost": true, "[::1]:8443": true, "[::1]": true,
		"evil.example:8443": false, "evil.example": false, "127.0.0.1.nip.io:8443": false, "": false, "10.0.0.1:8443": false,
	} {
		assert.Equal(t, want, loopbackHost(h), h)
	}
}

package faults

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string) (string, error) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

// TestTCPProxyCutSeversOpenConnectionsAndRefusesNewOnesUntilRestored pins
// the fault the PostgreSQL tests rely on: during a cut no byte gets
// through, on an old connection or a new one; after Restore a new
// connection works.
func TestTCPProxyCutSeversOpenConnectionsAndRefusesNewOnesUntilRestored(t *testing.T) {
	p, err := NewTCPProxy(echoServer(t))
	require.NoError(t, err)
	defer p.Close()

	old, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	defer old.Close()
	oldR := bufio.NewReader(old)
	got, err := roundTrip(t, old, oldR, "hello")
	require.NoError(t, err)
	require.Equal(t, "hello\n", got)

	p.Cut()
	_, err = roundTrip(t, old, oldR, "after the cut")
	require.Error(t, err, "an open connection carries nothing after Cut")
	fresh, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err) // the kernel accepts; the proxy closes it
	_, err = roundTrip(t, fresh, bufio.NewReader(fresh), "during the cut")
	require.Error(t, err, "a new connection carries nothing while cut")
	_ = fresh.Close()

	p.Restore()
	again, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	defer again.Close()
	got, err = roundTrip(t, again, bufio.NewReader(again), "restored")
	require.NoError(t, err)
	require.Equal(t, "restored\n", got)
	accepted, refused, severed := p.Stats()
	require.Equal(t, int64(2), accepted)
	require.Equal(t, int64(1), refused)
	require.Equal(t, int64(1), severed)
}

// TestTCPProxyLatencyDelaysEveryRoundTrip: with a latency set, a round
// trip takes at least that long; bytes arrive whole and in order.
func TestTCPProxyLatencyDelaysEveryRoundTrip(t *testing.T) {
	p, err := NewTCPProxy(echoServer(t))
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	p.SetLatency(300 * time.Millisecond)
	for i := range 3 {
		began := time.Now()
		msg := string(rune('a'+i)) + "-0123456789"
		got, err := roundTrip(t, c, r, msg)
		require.NoError(t, err)
		require.Equal(t, msg+"\n", got)
		require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond)
	}
	p.SetLatency(0)
	began := time.Now()
	_, err = roundTrip(t, c, r, "fast")
	require.NoError(t, err)
	require.Less(t, time.Since(began), 300*time.Millisecond)
}

// TestTCPProxyStallHoldsEveryByteUntilRestoredAndLosesNone: a partition
// that heals. While stalled, nothing reaches the other side (an open
// connection's request, or a new connection's); after Restore both
// answers arrive, whole.
func TestTCPProxyStallHoldsEveryByteUntilRestoredAndLosesNone(t *testing.T) {
	p, err := NewTCPProxy(echoServer(t))
	require.NoError(t, err)
	defer p.Close()
	old, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	defer old.Close()
	oldR := bufio.NewReader(old)
	_, err = roundTrip(t, old, oldR, "before")
	require.NoError(t, err)

	p.Stall()
	_, err = io.WriteString(old, "held\n")
	require.NoError(t, err)
	fresh, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	defer fresh.Close()
	_, err = io.WriteString(fresh, "new\n")
	require.NoError(t, err)
	require.NoError(t, old.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = oldR.ReadString('\n')
	require.Error(t, err, "no answer while stalled")

	p.Restore()
	require.NoError(t, old.SetReadDeadline(time.Now().Add(5*time.Second)))
	got, err := oldR.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", got)
	require.NoError(t, fresh.SetReadDeadline(time.Now().Add(5*time.Second)))
	got, err = bufio.NewReader(fresh).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "new\n", got)
	_, refused, severed := p.Stats()
	require.Zero(t, refused+severed, "a stall drops nothing")
}

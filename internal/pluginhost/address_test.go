package pluginhost

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

// victims listens on a Unix socket outside any plugin's socket folder and
// on a TCP port, and counts the connections they receive.
type victims struct {
	unix, tcp string
	hits      atomic.Int32
}

func listenVictims(t *testing.T) *victims {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "lethe-victim-") // short: a socket path has 108 bytes
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	v := &victims{unix: filepath.Join(dir, "victim.sock")}
	ul, err := net.Listen("unix", v.unix)
	require.NoError(t, err)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	v.tcp = tl.Addr().String()
	for _, l := range []net.Listener{ul, tl} {
		t.Cleanup(func() { _ = l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				v.hits.Add(1)
				_ = c.Close()
			}
		}()
	}
	return v
}

// TestPluginAddressOutsideItsSocketFolderIsRefused is issue 23 point 4: a
// plugin's handshake line may name only a Unix socket directly inside the
// socket folder Lethe made for that plugin process. A TCP address, another
// socket, a path that climbs out with "..", and a symlink in its own
// folder to another socket each fail the plugin's start with one line, and
// the socket they name receives no connection; with Lethe's protocol (mTLS
// on and off) and with Velero's.
func TestPluginAddressOutsideItsSocketFolderIsRefused(t *testing.T) {
	v := listenVictims(t)
	cases := []struct {
		name, network, addr string
		symlink             bool
	}{
		{"tcp", "tcp", v.tcp, false},
		{"another socket", "unix", v.unix, false},
		{"climbing out", "unix", "{dir}/../../.." + v.unix, false},
		{"symlink in its own folder", "unix", "{dir}/link", true},
	}
	protocols := []struct {
		name    string
		version int
		velero  bool
		noMTLS  bool
	}{
		{"lethe", plugin.ProtocolVersion, false, false},
		{"lethe without mTLS", plugin.ProtocolVersion, false, true},
		{"velero", VeleroProtocolVersion, true, false},
	}
	for _, proto := range protocols {
		for _, c := range cases {
			t.Run(proto.name+"/"+c.name, func(t *testing.T) {
				dir, vdir := pluginDir(t), pluginDir(t)
				args := []string{"-handshake='1|" + strconv.Itoa(proto.version) + "|" + c.network + "|" + c.addr + "|grpc|'"}
				if c.symlink {
					args = append(args, "-symlink="+v.unix)
				}
				cfg := &Config{Dir: dir, DisableAutoMTLS: proto.noMTLS, StartTimeout: 10e9}
				bin := filepath.Join(dir, "hostile")
				if proto.velero {
					cfg.VeleroDir = vdir
					bin = filepath.Join(vdir, "hostile")
				}
				addScript(t, filepath.Dir(bin), "hostile", args...)
				h := newHost(t, cfg)
				probs := h.Problems()
				require.Len(t, probs, 1)
				msg := probs[0].Err.Error()
				require.Contains(t, msg, "only a Unix socket in the socket folder Lethe made for this plugin is accepted")
				require.Contains(t, msg, Quote(bin))
				require.NotContains(t, msg, "\n", "one line")
				require.Empty(t, h.Plugins())
				require.NoError(t, h.Close())
				require.Zero(t, v.hits.Load(), "the address named in the handshake received a connection")
			})
		}
	}
	require.Zero(t, v.hits.Load())
}

// TestPluginSocketFolderIsTheProcesssOwn: each plugin process gets a fresh
// socket folder, and the one it served in is gone once it ended.
func TestPluginSocketFolderIsTheProcesssOwn(t *testing.T) {
	dir := pluginDir(t)
	addScript(t, dir, "a", "-names=example.com/a", "-state="+t.TempDir())
	addScript(t, dir, "b", "-names=example.com/b")
	h := newHost(t, &Config{Dir: dir, RestartBackoff: 1})
	folder := func(name string) string {
		env := environ(t, currentPID(t, h, name))
		require.Len(t, env["PLUGIN_UNIX_SOCKET_DIR"], 1)
		return env["PLUGIN_UNIX_SOCKET_DIR"][0]
	}
	a, b := folder("example.com/a"), folder("example.com/b")
	require.NotEqual(t, a, b)
	for _, f := range []string{a, b} {
		require.Equal(t, h.socketDir, filepath.Dir(f))
		require.True(t, strings.HasPrefix(filepath.Base(f), "plugin-"))
	}
	pid := currentPID(t, h, "example.com/a")
	got := run(t, h, "example.com/a", SessionOptions{}, "crash-once") // crashes, then is redelivered
	require.Equal(t, plugin.OutcomeDone, got[1].Outcome)
	require.NotEqual(t, pid, currentPID(t, h, "example.com/a"), "restarted")
	require.NotEqual(t, a, folder("example.com/a"), "a restarted process gets a new folder")
	require.NoDirExists(t, a, "the folder of the process that ended is removed")
}

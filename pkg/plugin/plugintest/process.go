package plugintest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/lethehq/lethe/pkg/plugin"
)

// Process is a plugin binary started the way the host starts it.
type Process struct {
	*Conn
	// Pid is the process id; the process leads its own process group.
	Pid int
	// ProtocolVersion is the protocol version negotiated in the handshake.
	ProtocolVersion int

	client   *goplugin.Client
	cmd      *exec.Cmd
	stopOnce sync.Once
	stopErr  error
}

// Start starts a built plugin binary the way the host does by default:
// through hashicorp/go-plugin with Lethe's handshake (plugin.Handshake,
// plugin.VersionedPlugins), gRPC only, with Lethe's automatic mTLS
// (plugin.NewHostMTLS, plugin.MTLSFDEnv), in a process group of its own. It
// dispenses a Conn to it. Like the host, it passes the plugin a minimal
// environment: the variables of plugin.PassedEnv from the test process's,
// then env ("KEY=value", what an operator would configure for the plugin),
// then the host's own; the mTLS key travels through an inherited pipe
// (plugin.MTLSFDEnv). The process is stopped when the test ends; call Stop
// to check that it shuts down gracefully.
func Start(t testing.TB, binary string, env ...string) *Process {
	t.Helper()
	p, err := start(t, binary, env, false)
	if err != nil {
		t.Fatalf("plugintest: %v", err)
	}
	return p
}

// start starts binary. goPluginAutoMTLS selects go-plugin's AutoMTLS
// instead of Lethe's, as pluginhost.Config.GoPluginAutoMTLS does.
func start(t testing.TB, binary string, env []string, goPluginAutoMTLS bool) (*Process, error) {
	abs, err := filepath.Abs(binary)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(abs)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for _, k := range plugin.PassedEnv() {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, env...) // later entries win
	// Like the host: sockets in a short, private folder of their own.
	sockets, err := os.MkdirTemp("/tmp", "lethe-plugintest-")
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockets) })
	cmd.Env = append(cmd.Env, "PLUGIN_UNIX_SOCKET_DIR="+sockets)
	var tlsConfig *tls.Config
	var pm *plugin.PluginMTLS
	if !goPluginAutoMTLS {
		m, err := plugin.NewHostMTLS()
		if err != nil {
			return nil, fmt.Errorf("mTLS: %w", err)
		}
		if pm, err = m.ForPlugin(); err != nil {
			return nil, fmt.Errorf("mTLS: %w", err)
		}
		if err := pm.Attach(cmd); err != nil {
			return nil, err
		}
		defer pm.Close()
		tlsConfig = pm.Config
	}
	logger := testLogger(t).Named("go-plugin")
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  plugin.Handshake,
		VersionedPlugins: plugin.VersionedPlugins(),
		Cmd:              cmd,
		SkipHostEnv:      true, // cmd.Env has what the host would pass
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         goPluginAutoMTLS,
		TLSConfig:        tlsConfig,
		Logger:           logger,
		GRPCDialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(plugin.MaxMessageSize),
			grpc.MaxCallSendMsgSize(plugin.MaxMessageSize),
		)},
	})
	p := &Process{client: client, cmd: cmd}
	t.Cleanup(func() { _ = p.Stop() })
	_, err = client.Start()
	if cmd.Process != nil {
		p.Pid = cmd.Process.Pid
	}
	if err != nil {
		return p, fmt.Errorf("start and handshake %s: %w", binary, err)
	}
	if pm != nil {
		if err := pm.CheckHandshake(); err != nil {
			return p, fmt.Errorf("handshake %s: %w", binary, err)
		}
	}
	rpc, err := client.Client()
	if err != nil {
		return p, fmt.Errorf("start and handshake %s: %w", binary, err)
	}
	raw, err := rpc.Dispense(plugin.PluginSetKey)
	if err != nil {
		return p, fmt.Errorf("%s: dispense %q: %w", binary, plugin.PluginSetKey, err)
	}
	stubs, ok := raw.(*plugin.Client)
	if !ok {
		return p, fmt.Errorf("%s: dispensed %T, want *plugin.Client", binary, raw)
	}
	p.Conn = &Conn{Stubs: stubs}
	p.ProtocolVersion = client.NegotiatedVersion()
	return p, nil
}

// Stop shuts the plugin down the way the host does (plugin.StopProcess:
// go-plugin's Shutdown call, SIGKILL of the process if it has not exited
// two seconds later, then SIGTERM and SIGKILL to what is left of its process
// group), then checks that it exited by itself, and that nothing was left
// in its process group. Stop is idempotent.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.stop() })
	return p.stopErr
}

func (p *Process) stop() error {
	// The host's first step; instead of its SIGTERM and SIGKILL to the
	// group, reapGroup below reports what is left, as a conformance failure.
	plugin.StopProcess(p.client, 0, 0)
	var errs []error
	if st := p.cmd.ProcessState; st == nil {
		if p.Pid != 0 {
			errs = append(errs, fmt.Errorf("plugin process %d was not waited for after Kill", p.Pid))
		}
	} else if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		errs = append(errs, fmt.Errorf("plugin process %d did not exit after the host closed its connection; go-plugin had to SIGKILL it", p.Pid))
	}
	if p.Pid != 0 {
		if err := reapGroup(p.Pid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// reapGroup checks that the process group pgid is empty, giving children a
// few seconds to follow their parent, and kills what is left.
func reapGroup(pgid int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Kill(-pgid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			return fmt.Errorf("processes of the plugin's process group %d outlived it; killed them", pgid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Build builds the Go main package pkg (a path or import path, as for go
// build) into a temporary directory and returns the binary's path. It is
// how a plugin's own tests get a binary for Conformance:
//
//	bin := plugintest.Build(t, ".")
func Build(t testing.TB, pkg string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("plugintest: Build needs the go command: %v", err)
	}
	name := filepath.Base(strings.TrimSuffix(pkg, "/"))
	if name == "." || name == "" || name == string(filepath.Separator) {
		name = "plugin"
	}
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(goBin, "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("plugintest: go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

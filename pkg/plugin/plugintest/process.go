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
// (plugin.NewHostMTLS, plugin.MTLSEnv), in a process group of its own. It
// dispenses a Conn to it.
// env entries ("KEY=value") are added to the test process's environment,
// and win over it. The process is stopped when the test ends; call Stop to
// check that it shuts down gracefully.
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
	cmd.Env = append(os.Environ(), env...) // later entries win
	var tlsConfig *tls.Config
	if !goPluginAutoMTLS {
		m, err := plugin.NewHostMTLS()
		if err != nil {
			return nil, fmt.Errorf("mTLS: %w", err)
		}
		entry, tc, err := m.ForPlugin()
		if err != nil {
			return nil, fmt.Errorf("mTLS: %w", err)
		}
		cmd.Env = append(cmd.Env, entry)
		tlsConfig = tc
	}
	logger := testLogger(t).Named("go-plugin")
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  plugin.Handshake,
		VersionedPlugins: plugin.VersionedPlugins(),
		Cmd:              cmd,
		SkipHostEnv:      true, // cmd.Env already has it, with env winning
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
	rpc, err := client.Client()
	if cmd.Process != nil {
		p.Pid = cmd.Process.Pid
	}
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

// Stop shuts the plugin down the way the host does (go-plugin's Kill: close
// the connection, let the plugin exit, SIGKILL it after two seconds), then
// checks that it exited by itself, and that nothing is left in its process
// group. Anything left is killed. Stop is idempotent.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.stop() })
	return p.stopErr
}

func (p *Process) stop() error {
	p.client.Kill()
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

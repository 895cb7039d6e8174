package pluginhost

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/lethehq/lethe/pkg/plugin"
)

// binary is one plugin executable and its current process. Sessions share
// the process; a failure seen by any of them kills it, and the next
// acquire restarts it after a backoff.
type binary struct {
	h        *Host
	path     string   // in the plugin folder
	exe      string   // path with symlinks resolved
	checksum string   // from the lock file; "" without one
	env      []string // baseEnv: what the process starts from
	tail     *tail    // last stderr lines, across restarts
	velero   bool     // an unmodified Velero plugin (velero.go)

	mu        sync.Mutex
	display   string   // how logs name it: its plugin names
	names     []string // plugins it serves
	cur       *proc
	failures  int // consecutive
	lastErr   error
	nextStart time.Time
	starting  chan struct{} // closed when an ongoing start ends
	img       *os.File      // sealed copy of a locked binary
}

// proc is one running plugin process.
type proc struct {
	h        *Host
	client   *goplugin.Client
	pid      int
	sock     *sockFolder   // its socket folder
	cg       *pluginCgroup // its cgroup; nil without one
	stubs    *plugin.Client
	protocol int
	killOnce sync.Once
	killing  chan struct{} // closed when kill begins
	grace    time.Duration
	// connected is set once go-plugin's RPC client exists (Client()
	// succeeded): only then may kill call go-plugin's Kill (see kill).
	connected bool
}

// start starts a process and handshakes with it. Trust checks happen
// before the binary runs: a locked binary runs from a sealed copy whose
// sha256 matched the lock file (see image). The process gets a minimal
// environment (baseEnv, then the host's own variables), its TLS material
// through an inherited pipe, and runs as Config.PluginUser when set.
func (b *binary) start() (*proc, error) {
	return b.startIn(false)
}

// startIn starts the process; noCgroup keeps it out of a cgroup of its own.
func (b *binary) startIn(noCgroup bool) (*proc, error) {
	cfg := b.h.cfg
	cmd := exec.Command(b.exe)
	cmd.Args[0] = b.path
	// Own process group, so that a kill reaches the plugin's children too.
	// Pdeathsig signals the plugin if lethe itself dies without a chance to
	// clean up (SIGKILL, OOM kill). It is SIGTERM, not SIGKILL, so that the
	// SDK's Serve can end the plugin's descendants (it is their subreaper)
	// before it returns; a plugin that ignores SIGTERM outlives lethe.
	// Linux sends it when the thread that started the plugin exits; the Go
	// runtime keeps its threads, and a spurious signal would only look like
	// a crash, which the host survives by restarting the plugin.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM, Credential: b.h.user.credential()}
	// Where cgroup v2 is writable, the process is created in a cgroup of
	// its own (cgroup_linux.go).
	var cg *pluginCgroup
	if !noCgroup {
		if cg = b.h.newCgroup(); cg != nil {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cg.fd
		}
	}
	if b.h.user != nil {
		cmd.Dir = "/" // Lethe's working folder may be closed to that user
	}
	if b.checksum != "" {
		img, err := b.image()
		if err != nil {
			cg.remove(0)
			return nil, err
		}
		cmd.Path = "/proc/self/fd/" + strconv.Itoa(3+len(cmd.ExtraFiles))
		cmd.ExtraFiles = append(cmd.ExtraFiles, img)
	}
	// Each process gets a socket folder of its own: the only place its
	// handshake may name (address.go).
	sock, err := b.h.newSockFolder()
	if err != nil {
		cg.remove(0)
		return nil, fmt.Errorf("plugin binary %s: %w", Quote(b.path), err)
	}
	p := &proc{h: b.h, sock: sock, cg: cg, grace: cfg.KillGrace, killing: make(chan struct{})}
	// The host's own variables come last: nothing inherited or configured
	// can override them (go-plugin appends its handshake variables after).
	cmd.Env = append(slices.Clone(b.env), goplugin.EnvUnixSocketDir+"="+sock.path)
	var tlsConfig *tls.Config
	var pm *plugin.PluginMTLS
	handshake, versioned, dispense := plugin.Handshake, plugin.VersionedPlugins(), plugin.PluginSetKey
	if b.velero {
		// Velero's framework knows go-plugin's AutoMTLS, not Lethe's.
		handshake, versioned, dispense = veleroHandshake, veleroPlugins(), veleroPluginSetKey
	}
	if b.h.mtls != nil && !b.velero {
		if pm, err = b.h.mtls.ForPlugin(); err != nil {
			sock.remove()
			cg.remove(0)
			return nil, fmt.Errorf("plugin binary %s: mTLS: %w", b.path, err)
		}
		if err := pm.Attach(cmd); err != nil {
			sock.remove()
			cg.remove(0)
			return nil, fmt.Errorf("plugin binary %s: %w", b.path, err)
		}
		defer pm.Close()
		tlsConfig = pm.Config
	}
	logger := cfg.Logger.Named("plugin")
	lines := lineNamer{Logger: logger, b: b}
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  handshake,
		VersionedPlugins: versioned,
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         !cfg.DisableAutoMTLS && (cfg.GoPluginAutoMTLS || b.velero),
		TLSConfig:        tlsConfig,
		StartTimeout:     cfg.StartTimeout,
		Logger:           pluginLogger{Logger: logger, b: b},
		Stderr:           b.tail,
		SyncStdout:       &lineLogger{log: lines.Debug},
		SyncStderr:       &lineLogger{log: lines.Info, tail: b.tail},
		GRPCDialOptions: []grpc.DialOption{
			grpc.WithDefaultCallOptions(
				grpc.MaxCallRecvMsgSize(plugin.MaxMessageSize),
				grpc.MaxCallSendMsgSize(plugin.MaxMessageSize),
			),
			// After go-plugin's own dialer, so it replaces it: the
			// connection goes only to the socket accept checked.
			grpc.WithContextDialer(sock.dial),
		},
	})
	p.client = client
	addr, err := startClient(client)
	cg.started()
	if cmd.Process != nil {
		p.pid = cmd.Process.Pid
		reaper.register(p.pid)
	}
	if err != nil {
		p.kill(false)
		if cmd.Process == nil && cg != nil {
			// Not even created: maybe the kernel refused the cgroup
			// (clone3 CLONE_INTO_CGROUP). Once more without one.
			if p2, err2 := b.startIn(true); err2 == nil {
				b.h.cgroupsOff("cannot start a process in a cgroup", err)
				return p2, nil
			}
		}
		return nil, b.startError(err)
	}
	if err := sock.accept(addr); err != nil {
		p.kill(false)
		return nil, fmt.Errorf("plugin binary %s: %w", Quote(b.path), err)
	}
	if pm != nil {
		if err := pm.CheckHandshake(); err != nil {
			p.kill(false)
			return nil, fmt.Errorf("plugin binary %s: %w", b.path, err)
		}
	}
	rpc, err := client.Client()
	if err != nil {
		p.kill(false)
		return nil, b.startError(err)
	}
	p.connected = true
	raw, err := rpc.Dispense(dispense)
	if err != nil {
		p.kill(false)
		return nil, fmt.Errorf("plugin binary %s: %w", b.path, err)
	}
	stubs, ok := raw.(*plugin.Client)
	if !ok {
		p.kill(false)
		return nil, fmt.Errorf("plugin binary %s: unexpected client type %T", b.path, raw)
	}
	p.stubs = stubs
	p.protocol = client.NegotiatedVersion()
	go b.watch(p)
	return p, nil
}

// watchInterval is how often watch looks whether a plugin process exited.
const watchInterval = 100 * time.Millisecond

// watch notices a plugin process that exits on its own while no session
// uses it (a crash, an exit between items), so that what it left is ended
// then, not at its next use: it fails the process, which kills and sweeps
// it. It returns once the process is killed.
func (b *binary) watch(p *proc) {
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-p.killing:
			return
		case <-t.C:
		}
		if p.client.Exited() {
			b.fail(p, errors.New("the plugin process exited"))
			return
		}
	}
}

// startClient starts the go-plugin client. go-plugin panics when a
// plugin's handshake line carries a certificate while the host has no TLS
// configuration (mTLS disabled): a plugin must not be able to crash Lethe,
// so that becomes an error.
func startClient(c *goplugin.Client) (addr net.Addr, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the plugin's handshake line made go-plugin fail: %v", r)
		}
	}()
	return c.Start()
}

// image returns the sealed in-memory copy of a locked binary, made and
// checked against the lock file at the first start and reused by
// restarts: the same checked bytes run every time.
func (b *binary) image() (*os.File, error) {
	b.mu.Lock()
	img := b.img
	b.mu.Unlock()
	if img != nil {
		return img, nil
	}
	img, sum, err := sealedImage(b.exe)
	if err != nil {
		return nil, fmt.Errorf("plugin binary %s: %w", b.path, err)
	}
	if testHookSealed != nil {
		testHookSealed(b.exe)
	}
	if sum != b.checksum {
		img.Close()
		lock := b.h.cfg.LockFile
		if b.velero {
			lock = b.h.cfg.VeleroLockFile
		}
		return nil, fmt.Errorf("plugin binary %s does not match its sha256 in the lock file %s; refusing to run it (if you trust the new binary, run `lethe plugin lock`)", b.path, lock)
	}
	b.mu.Lock()
	b.img = img
	b.mu.Unlock()
	return img, nil
}

// closeImage releases the sealed copy, once no process can start.
func (b *binary) closeImage() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.img != nil {
		b.img.Close()
		b.img = nil
	}
}

func (b *binary) startError(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "incompatible API version"):
		return fmt.Errorf("plugin binary %s speaks a plugin protocol version this Lethe does not (Lethe speaks %d): %s; rebuild the plugin against a matching SDK", Quote(b.path), plugin.ProtocolVersion, sanitizeMessage(msg))
	case strings.Contains(msg, "Unrecognized remote plugin message"), strings.Contains(msg, "plugin exited before we could connect"):
		if lines := b.tail.lines(); len(lines) > 0 {
			return fmt.Errorf("plugin binary %s failed to start: %s; last stderr: %s", Quote(b.path), sanitizeMessage(firstLine(msg)), strings.Join(lines, " | "))
		}
		return fmt.Errorf("plugin binary %s failed to start: %s (is it a Lethe plugin built for this platform?)", Quote(b.path), sanitizeMessage(firstLine(msg)))
	}
	return fmt.Errorf("plugin binary %s: %s", Quote(b.path), sanitizeMessage(msg))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// acquire returns the running process, starting one if needed, after the
// backoff of previous failures. It fails once the binary has failed
// MaxRestarts+1 times in a row.
func (b *binary) acquire(ctx context.Context) (*proc, error) {
	for {
		if b.h.isClosed() {
			return nil, ErrClosed
		}
		b.mu.Lock()
		if b.cur != nil {
			p := b.cur
			b.mu.Unlock()
			return p, nil
		}
		if b.failures > b.h.cfg.MaxRestarts {
			err := b.brokenErrLH()
			b.mu.Unlock()
			return nil, err
		}
		if ch := b.starting; ch != nil {
			b.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-b.h.done:
				return nil, ErrClosed
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		b.starting = ch
		wait := time.Until(b.nextStart)
		b.mu.Unlock()

		p, err := b.startAfter(ctx, wait)
		b.mu.Lock()
		b.starting = nil
		close(ch)
		switch {
		case err == nil && b.h.isClosed():
			b.mu.Unlock()
			p.kill(false)
			return nil, ErrClosed
		case err == nil:
			b.cur = p
			b.mu.Unlock()
			return p, nil
		case ctx.Err() != nil:
			b.mu.Unlock()
			return nil, ctx.Err()
		default:
			b.recordFailureLH(err)
			b.mu.Unlock()
			b.h.logger.Error("plugin failed to start", "binary", b.path, "error", err)
		}
	}
}

func (b *binary) startAfter(ctx context.Context, wait time.Duration) (*proc, error) {
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-b.h.done:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return b.start()
}

func (b *binary) recordFailureLH(err error) {
	b.failures++
	b.lastErr = err
	backoff := b.h.cfg.RestartBackoff << min(b.failures-1, 20)
	b.nextStart = time.Now().Add(min(backoff, b.h.cfg.MaxRestartBackoff))
}

func (b *binary) brokenErrLH() error {
	msg := fmt.Sprintf("plugin %s (%s) failed %d times in a row, giving up: %v", b.display, Quote(b.path), b.failures, b.lastErr)
	if lines := b.tail.lines(); len(lines) > 0 {
		msg += "; last stderr: " + strings.Join(lines, " | ")
	}
	return errors.New(msg)
}

// fail records that p failed (crashed, hung, broke a stream) and kills it,
// unless it was already replaced.
func (b *binary) fail(p *proc, err error) {
	b.mu.Lock()
	if b.cur == p {
		b.cur = nil
		b.recordFailureLH(err)
		b.h.logger.Warn("plugin process failed; it will be restarted", "plugin", b.display, "binary", b.path, "pid", p.pid, "error", err, "consecutive_failures", b.failures)
		b.h.count(b.display, 1, 0)
	}
	b.mu.Unlock()
	p.kill(false)
}

// progress records that p answered: its binary is healthy again.
func (b *binary) progress(p *proc) {
	b.mu.Lock()
	if b.cur == p {
		b.failures = 0
	}
	b.mu.Unlock()
}

// resetIfBroken gives a binary that was given up on a fresh chance, for a
// new session.
func (b *binary) resetIfBroken() {
	b.mu.Lock()
	if b.failures > b.h.cfg.MaxRestarts {
		b.failures = 0
		b.nextStart = time.Time{}
	}
	b.mu.Unlock()
}

func (b *binary) shutdown() {
	b.mu.Lock()
	p := b.cur
	b.cur = nil
	ch := b.starting
	b.mu.Unlock()
	if ch != nil {
		<-ch // a start in progress ends, sees the host closed and kills it
	}
	if p != nil {
		p.kill(true)
	}
}

// kill ends the process and everything it started, and waits until they
// are gone:
//
//  1. graceful (Close): go-plugin's Shutdown call, then SIGTERM to what is
//     left of the process group, then SIGKILL after the grace
//     (plugin.StopProcess); otherwise (a hang, a crash, a broken stream, a
//     restart): SIGTERM to the process group, then SIGKILL to the group
//     after the grace, or as soon as the group is gone;
//  2. cgroup.kill of its cgroup, when it has one (cgroup_linux.go);
//  3. once go-plugin has waited for the process: the sweep of what is left
//     (reap_linux.go), its zombies reaped, and its socket folder removed.
//
// A process that failed before its RPC client existed is not handed to
// go-plugin's Kill: that would first dial the dying plugin to close a
// client it never made, and when that dial's streams fail it leaks the
// gRPC connection (seen as goroutines left behind after a failed start).
func (p *proc) kill(graceful bool) {
	p.killOnce.Do(func() {
		close(p.killing)
		switch {
		case graceful && p.connected:
			plugin.StopProcess(p.client, p.pid, p.grace)
		case p.pid > 0:
			p.terminate()
		}
		members := p.cg.kill()
		if p.connected {
			p.client.Kill()
		} else {
			for deadline := time.Now().Add(p.grace + time.Second); p.pid > 0 && !p.client.Exited() && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
		}
		if p.pid > 0 && p.client.Exited() {
			reaper.unregister(p.pid)
		}
		p.cg.wait(p.grace + time.Second)
		reaper.sweep(p.pid, p.cg == nil, members)
		p.cg.remove(0)
		p.sock.remove()
	})
}

// terminate sends SIGTERM to the process group, waits until it is gone or
// the grace is over, then sends SIGKILL to the group.
func (p *proc) terminate() {
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	for deadline := time.Now().Add(p.grace); groupAlive(p.pid) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
}

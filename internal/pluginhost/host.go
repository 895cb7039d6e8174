package pluginhost

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lethehq/lethe/pkg/plugin"
	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

// Defaults of Config.
const (
	ItemTimeoutDefault       = 5 * time.Minute
	CancelGraceDefault       = 10 * time.Second
	MaxRestartsDefault       = 3
	RestartBackoffDefault    = 100 * time.Millisecond
	MaxRestartBackoffDefault = 5 * time.Second
	StartTimeoutDefault      = 30 * time.Second
	KillGraceDefault         = 2 * time.Second
	StderrTailLinesDefault   = 20
)

// Checksum statuses of Info.ChecksumStatus.
const (
	ChecksumLocked   = "locked"   // the binary matches the lock file
	ChecksumUnlocked = "unlocked" // there is no lock file
)

// ErrClosed is returned once the host is closed.
var ErrClosed = errors.New("plugin host is closed")

// Config configures a Host. Only Dir is required.
type Config struct {
	// Dir is the plugin directory. Every executable in it is a plugin
	// binary, except hidden files and the lock file.
	Dir string

	// Logger receives the host's logs and every plugin's logs, the latter
	// under "plugin.<plugin name>" at the level the plugin logged. Default:
	// a logger that discards everything.
	Logger hclog.Logger

	// ItemTimeout is how long one item may take, from the moment it is sent
	// to the plugin until its result arrives (default 5m). On expiry the
	// host cancels the item; if the plugin does not answer within
	// CancelGrace, it is deemed hung: it is killed and restarted, and the
	// item fails with "timed out after …".
	ItemTimeout time.Duration
	// PluginTimeouts overrides ItemTimeout per plugin name (full or bare).
	PluginTimeouts map[string]time.Duration
	// CancelGrace is how long a plugin has to answer for a cancelled item
	// before it is deemed hung (default 10s).
	CancelGrace time.Duration

	// MaxRestarts is how many consecutive failures (crash, hang, failed
	// start) a plugin binary may have; after that its items fail with an
	// error that names it and quotes its last stderr lines (default 3). It
	// also bounds how many times one item is redelivered after crashes.
	MaxRestarts int
	// RestartBackoff is the wait before the first restart; it doubles with
	// each consecutive failure up to MaxRestartBackoff (defaults 100ms, 5s).
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration

	// StartTimeout bounds one process start and handshake (default 30s).
	StartTimeout time.Duration
	// KillGrace is how long Close waits after SIGTERM before SIGKILL
	// (default 2s). Crashed and hung plugins get SIGKILL at once.
	KillGrace time.Duration

	// LockFile is the lock file (default Dir/lethe-plugins.lock). While it
	// exists, binaries that are not in it, or whose sha256 differs, are
	// refused before they run.
	LockFile string
	// DisableAutoMTLS turns off automatic mTLS, which is on by default.
	// Only for debugging.
	DisableAutoMTLS bool
	// GoPluginAutoMTLS uses go-plugin's own AutoMTLS instead of Lethe's,
	// for plugins that call go-plugin's Serve directly rather than the SDK's.
	// go-plugin's uses P-521 keys, which cost tens of milliseconds of CPU
	// per start on a small machine; Lethe's (see plugin.MTLSEnv) uses
	// P-256 and has the same properties: one-time certificates, each side
	// trusting only the other.
	GoPluginAutoMTLS bool
	// SocketDir is where plugins create their unix sockets. Default: a new
	// directory under /tmp, so that a long TMPDIR never overflows the
	// 108-byte socket path limit. It is removed by Close when the host
	// created it.
	SocketDir string
	// StderrTailLines is how many of a binary's last stderr lines are kept
	// and quoted when it is given up on (default 20).
	StderrTailLines int
}

func (c *Config) withDefaults() *Config {
	out := *c
	out.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger())
	out.ItemTimeout = cmp.Or(c.ItemTimeout, ItemTimeoutDefault)
	out.CancelGrace = cmp.Or(c.CancelGrace, CancelGraceDefault)
	out.MaxRestarts = cmp.Or(c.MaxRestarts, MaxRestartsDefault)
	out.RestartBackoff = cmp.Or(c.RestartBackoff, RestartBackoffDefault)
	out.MaxRestartBackoff = cmp.Or(c.MaxRestartBackoff, MaxRestartBackoffDefault)
	out.StartTimeout = cmp.Or(c.StartTimeout, StartTimeoutDefault)
	out.KillGrace = cmp.Or(c.KillGrace, KillGraceDefault)
	out.StderrTailLines = cmp.Or(c.StderrTailLines, StderrTailLinesDefault)
	if out.Dir != "" {
		out.LockFile = cmp.Or(c.LockFile, filepath.Join(c.Dir, LockFileName))
	}
	return &out
}

func (c *Config) validate() error {
	if c.Dir == "" {
		return errors.New("pluginhost: Config.Dir is required")
	}
	for name, d := range map[string]time.Duration{
		"ItemTimeout": c.ItemTimeout, "CancelGrace": c.CancelGrace, "RestartBackoff": c.RestartBackoff,
		"MaxRestartBackoff": c.MaxRestartBackoff, "StartTimeout": c.StartTimeout, "KillGrace": c.KillGrace,
	} {
		if d < 0 {
			return fmt.Errorf("pluginhost: Config.%s %s is negative", name, d)
		}
	}
	if c.MaxRestarts < 0 {
		return fmt.Errorf("pluginhost: Config.MaxRestarts %d is negative", c.MaxRestarts)
	}
	for name, d := range c.PluginTimeouts {
		if _, err := plugin.NormalizeName(name); err != nil {
			return fmt.Errorf("pluginhost: Config.PluginTimeouts: %w", err)
		}
		if d <= 0 {
			return fmt.Errorf("pluginhost: Config.PluginTimeouts[%q] %s is not positive", name, d)
		}
	}
	return nil
}

// Host runs the plugin binaries of one directory. It is safe for concurrent
// use. Close it to kill every plugin process.
type Host struct {
	cfg       *Config
	logger    hclog.Logger
	lock      *Lock
	socketDir string
	ownSocket bool
	timeouts  map[string]time.Duration
	mtls      *plugin.HostMTLS // nil unless Lethe's automatic mTLS is on

	binaries []*binary
	plugins  map[string]*entry
	infos    []Info

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Close
}

type entry struct {
	info Info
	bin  *binary
}

// New discovers the plugins of cfg.Dir: it starts every binary concurrently,
// checks its trust, handshakes, lists its plugins and resolves their
// selectors. It fails, with every problem found, when a binary is refused
// (lock file, permissions, protocol version), fails to start, or serves a
// name that is invalid or already taken. The processes stay up for
// sessions; Close kills them.
func New(cfg *Config) (*Host, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	h := &Host{
		cfg:      c,
		logger:   c.Logger.Named("pluginhost"),
		plugins:  map[string]*entry{},
		timeouts: map[string]time.Duration{},
		done:     make(chan struct{}),
	}
	for name, d := range c.PluginTimeouts {
		full, _ := plugin.NormalizeName(name)
		h.timeouts[full] = d
	}
	if !c.DisableAutoMTLS && !c.GoPluginAutoMTLS {
		m, err := plugin.NewHostMTLS()
		if err != nil {
			return nil, fmt.Errorf("plugin mTLS: %w", err)
		}
		h.mtls = m
	}
	lockStat, err := os.Stat(c.LockFile)
	if err == nil && lockStat.Mode().Perm()&0o002 != 0 {
		return nil, fmt.Errorf("plugin lock file %s is world-writable; refusing to trust it", c.LockFile)
	}
	if h.lock, err = ReadLock(c.LockFile); err != nil {
		return nil, err
	}
	paths, err := listBinaries(c.Dir, filepath.Base(c.LockFile))
	if err != nil {
		return nil, err
	}
	if c.SocketDir != "" {
		h.socketDir = c.SocketDir
	} else {
		sweepSocketDirs("/tmp", h.logger)
		if h.socketDir, err = os.MkdirTemp("/tmp", socketDirPrefix(os.Getpid())); err != nil {
			return nil, fmt.Errorf("plugin socket directory: %w", err)
		}
		h.ownSocket = true
	}
	for _, p := range paths {
		b := &binary{h: h, path: p, display: filepath.Base(p), tail: newTail(c.StderrTailLines)}
		if h.lock != nil {
			e, ok := h.lock.Plugins[filepath.Base(p)]
			if !ok {
				err = errors.Join(err, fmt.Errorf("plugin binary %s is not in the lock file %s; refusing to run it (run `lethe plugin lock` to trust it)", p, c.LockFile))
				continue
			}
			b.checksum = e.SHA256
		}
		h.binaries = append(h.binaries, b)
	}
	if err != nil {
		h.Close()
		return nil, err
	}
	if err := h.discover(); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// discover starts every binary concurrently and registers its plugins.
func (h *Host) discover() error {
	errs := make([]error, len(h.binaries))
	found := make([][]Info, len(h.binaries))
	var wg sync.WaitGroup
	for i, b := range h.binaries {
		wg.Go(func() {
			found[i], errs[i] = b.discover()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var dups []error
	for i, b := range h.binaries {
		for _, info := range found[i] {
			if prev, ok := h.plugins[info.Name]; ok {
				dups = append(dups, fmt.Errorf("plugin %q is served by two binaries, %s and %s; remove one", info.Name, prev.info.Binary, info.Binary))
				continue
			}
			h.plugins[info.Name] = &entry{info: info, bin: b}
			h.infos = append(h.infos, info)
		}
	}
	if err := errors.Join(dups...); err != nil {
		return err
	}
	slices.SortFunc(h.infos, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return nil
}

// Plugins returns every discovered plugin, sorted by name: the order in
// which plugins run for an item.
func (h *Host) Plugins() []Info {
	return slices.Clone(h.infos)
}

// Plugin returns the plugin with that name; a bare name means lethe.io/name.
func (h *Host) Plugin(name string) (Info, bool) {
	full, err := plugin.NormalizeName(name)
	if err != nil {
		return Info{}, false
	}
	e, ok := h.plugins[full]
	if !ok {
		return Info{}, false
	}
	return e.info, true
}

// Close kills every plugin process and its process group: SIGTERM, then
// SIGKILL after KillGrace. Open sessions fail their remaining items. It is
// safe to call more than once and from a signal handler's goroutine.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.done)
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, b := range h.binaries {
		wg.Go(b.shutdown)
	}
	wg.Wait()
	if h.ownSocket {
		os.RemoveAll(h.socketDir)
	}
	return nil
}

func (h *Host) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

func (h *Host) timeoutFor(name string) time.Duration {
	if d, ok := h.timeouts[name]; ok {
		return d
	}
	return h.cfg.ItemTimeout
}

// discover starts the binary, lists its plugins and resolves their
// selectors.
func (b *binary) discover() ([]Info, error) {
	p, err := b.start()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.h.cfg.StartTimeout)
	defer cancel()
	infos, err := b.describe(ctx, p)
	if err != nil {
		p.kill(false)
		return nil, err
	}
	names := make([]string, len(infos))
	for i, in := range infos {
		names[i] = in.Name
	}
	b.mu.Lock()
	b.cur = p
	b.names = names
	b.display = strings.Join(names, ",")
	b.mu.Unlock()
	return infos, nil
}

func (b *binary) describe(ctx context.Context, p *proc) ([]Info, error) {
	list, err := p.stubs.Info.ListPlugins(ctx, &pluginv1.ListPluginsRequest{})
	if err != nil {
		msg := status.Convert(err).Message()
		if strings.Contains(msg, "does not look like a TLS handshake") {
			return nil, fmt.Errorf("plugin binary %s does not serve TLS: it does not speak Lethe's automatic mTLS (LETHE_PLUGIN_MTLS); rebuild it against a current pkg/plugin (see docs/plugin-authoring.md)", b.path)
		}
		return nil, fmt.Errorf("plugin binary %s: ListPlugins: %s", b.path, msg)
	}
	var infos []Info
	var errs []error
	seen := map[string]bool{}
	for _, d := range list.GetPlugins() {
		if d.GetKind() != pluginv1.PluginKind_PLUGIN_KIND_DELETE_ITEM_ACTION {
			b.h.logger.Warn("ignoring a plugin of an unknown kind", "binary", b.path, "name", d.GetName(), "kind", d.GetKind().String())
			continue
		}
		name, err := plugin.NormalizeName(d.GetName())
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin binary %s: %w", b.path, err))
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("plugin binary %s lists plugin %q twice", b.path, name))
			continue
		}
		seen[name] = true
		resp, err := p.stubs.Action.AppliesTo(ctx, &pluginv1.AppliesToRequest{Plugin: name})
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin %q (%s): AppliesTo: %s", name, b.path, status.Convert(err).Message()))
			continue
		}
		sel := selectorFromProto(resp.GetSelector())
		m, err := sel.Compile()
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin %q (%s): %w", name, b.path, err))
			continue
		}
		info := Info{
			Name:            name,
			Binary:          b.path,
			ProtocolVersion: p.protocol,
			Version:         d.GetVersion(),
			Selector:        sel,
			Matcher:         m,
			MaxConcurrency:  int(cmp.Or(d.GetMaxConcurrency(), uint32(plugin.DefaultMaxConcurrency))),
			ChecksumStatus:  ChecksumUnlocked,
		}
		if b.checksum != "" {
			info.Checksum = b.checksum
			info.ChecksumStatus = ChecksumLocked
		}
		infos = append(infos, info)
	}
	if len(infos) == 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("plugin binary %s serves no DeleteItemAction plugin", b.path))
	}
	return infos, errors.Join(errs...)
}

// isUnavailable reports whether a gRPC error means the process is gone.
func isUnavailable(err error) bool {
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.Canceled
}

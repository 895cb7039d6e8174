package pluginhost

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
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
	// error that names it and quotes its last stderr lines (default 3). Only
	// an item answered with an outcome other than failed resets the count.
	MaxRestarts int
	// RestartBackoff is the wait before the first restart; it doubles with
	// each consecutive failure up to MaxRestartBackoff (defaults 100ms, 5s).
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration

	// StartTimeout bounds one process start and handshake (default 30s).
	StartTimeout time.Duration
	// KillGrace is how long a plugin process has between SIGTERM and
	// SIGKILL (default 2s). A plugin killed for a timed-out item or a
	// broken stream, or one being restarted, gets SIGTERM to its process
	// group, then, after KillGrace, SIGKILL to the group (and cgroup.kill
	// of its cgroup). Close first asks each plugin to shut down through
	// go-plugin (which waits 2s for it to exit), then does the same.
	KillGrace time.Duration
	// DisableCgroups keeps plugin processes in Lethe's own cgroup even
	// where cgroup v2 is writable: what they leave is then found through
	// Lethe's child subreaper only (reap_linux.go). For tests and
	// debugging.
	DisableCgroups bool

	// LockFile is the lock file (default Dir/lethe-plugins.lock). While it
	// exists, binaries that are not in it, or whose sha256 differs, are
	// refused before they run; a locked binary runs from a sealed copy of
	// the bytes that were checked. Outside the plugin folder, it is safe
	// from whoever may write that folder.
	LockFile string
	// RequireLock refuses to start without a lock file (and without the
	// Velero plugins' one, when VeleroDir is set) when there are binaries
	// to pin. Pinning is all or
	// nothing in any case: while either lock file exists, the other must
	// too, so that deleting one cannot let unpinned binaries run.
	RequireLock bool

	// PluginEnv is what the operator configures for each plugin binary,
	// keyed by the binary's file name in Dir, then by variable name. A
	// plugin process starts with plugin.PassedEnv from the host's
	// environment, then these, then the host's own variables; nothing
	// else of the host's environment reaches it. The host's own variables
	// (ReservedEnv) cannot be configured.
	PluginEnv map[string]map[string]string
	// PluginUser, when set, is the user (name or uid) plugin processes run
	// as, so that a plugin cannot read or change Lethe's files, memory or
	// credentials. Lethe must run as root for it: it switches users and
	// reaches the sockets the plugins create. Each user gets a socket
	// folder of its own (mode 0700, owned by that user) inside the host's
	// socket folder, which other users may then traverse (mode 0711) but
	// not list.
	PluginUser string
	// DisableAutoMTLS turns off automatic mTLS, which is on by default.
	// Only for debugging.
	DisableAutoMTLS bool
	// GoPluginAutoMTLS uses go-plugin's own AutoMTLS instead of Lethe's,
	// for plugins that call go-plugin's Serve directly rather than the SDK's.
	// go-plugin's uses P-521 keys, which cost tens of milliseconds of CPU
	// per start on a small machine. Lethe's (see plugin.MTLSFDEnv) uses
	// P-256, pins each side's exact certificate, and keeps the plugin's key
	// out of its environment. go-plugin's trusts whatever certificate the
	// plugin's handshake line carries, which is weaker.
	GoPluginAutoMTLS bool
	// SocketDir is where plugins create their unix sockets. Default: a new
	// directory under /tmp, so that a long TMPDIR never overflows the
	// 108-byte socket path limit. It is removed by Close when the host
	// created it.
	SocketDir string
	// StderrTailLines is how many of a binary's last stderr lines are kept
	// and quoted when it is given up on (default 20).
	StderrTailLines int

	// VeleroDir, when set, is a folder of unmodified Velero
	// DeleteItemAction plugin binaries, run beside Lethe's own (see
	// velero.go) under the same rules: a missing folder is an error, a
	// lock file (VeleroLockFile, default VeleroDir/lethe-plugins.lock)
	// pins them, PluginEnv configures them by file name. Keep
	// VeleroLockFile out of VeleroDir, like LockFile.
	VeleroDir      string
	VeleroLockFile string
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
		out.LockFile = cmp.Or(c.LockFile, DefaultLockFile(c.Dir))
	}
	if out.VeleroDir != "" {
		out.VeleroLockFile = cmp.Or(c.VeleroLockFile, DefaultLockFile(c.VeleroDir))
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
	if err := validateEnv(c.PluginEnv); err != nil {
		return fmt.Errorf("pluginhost: %w", err)
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
	user      *pluginUser      // nil unless plugins run as another user
	sockSeq   atomic.Uint64    // names each plugin's socket folder

	cgroupMu  sync.Mutex
	cgroupDir string // Lethe's own cgroup v2 folder; "" without cgroups
	cgroupSeq atomic.Uint64

	binaries []*binary // loaded: no Problem
	plugins  map[string]*entry
	infos    []Info
	problems []Problem

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Close

	statsMu sync.Mutex
	stats   map[string]Stats
}

// Stats counts what happened to a plugin since the host started: process
// restarts (a crash, a hang, a broken stream), keyed by the names the
// binary serves, and items that timed out, keyed by plugin name.
type Stats struct {
	Restarts int64
	Timeouts int64
}

// Stats returns the counters, for metrics.
func (h *Host) Stats() map[string]Stats {
	h.statsMu.Lock()
	defer h.statsMu.Unlock()
	out := make(map[string]Stats, len(h.stats))
	for k, v := range h.stats {
		out[k] = v
	}
	return out
}

func (h *Host) count(name string, restarts, timeouts int64) {
	h.statsMu.Lock()
	defer h.statsMu.Unlock()
	if h.stats == nil {
		h.stats = map[string]Stats{}
	}
	st := h.stats[name]
	st.Restarts += restarts
	st.Timeouts += timeouts
	h.stats[name] = st
}

type entry struct {
	info Info
	bin  *binary
}

// New discovers the plugins of cfg.Dir: it starts every binary concurrently,
// checks its trust, handshakes, lists its plugins and resolves their
// selectors. The processes stay up for sessions; Close kills them.
//
// New fails, and runs nothing, when the directory is missing
// (ErrPluginDirMissing), unreadable, not a directory or world-writable
// (*PluginDirError), when a file in it is not executable
// (*NotExecutableError), and when the lock file pins a binary that is absent
// (*LockedBinaryMissingError). An empty directory is not an error. A binary
// refused on its own (not in the lock file, checksum mismatch,
// world-writable, fails to start, invalid or reserved name, invalid
// version, a name another binary serves too) is a Problem: its plugins are
// not loaded, and the others are.
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
	if c.PluginUser != "" {
		u, err := lookupPluginUser(c.PluginUser)
		if err != nil {
			return nil, err
		}
		h.user = u
	}
	closeOnExecInherited()
	var err error
	if h.lock, err = ReadLock(c.LockFile); err != nil {
		return nil, err
	}
	entries, refused, err := listBinaries(c.Dir, c.LockFile)
	if err != nil {
		return nil, err
	}
	// A folder without binaries needs no lock: nothing would run unpinned.
	if h.lock == nil && c.RequireLock && len(entries)+len(refused) > 0 {
		return nil, fmt.Errorf("plugin lock file %s does not exist, and a lock is required: pin the plugins with `lethe plugin lock` first", Quote(c.LockFile))
	}
	vdir, err := h.listVelero()
	if err != nil {
		return nil, err
	}
	if h.lock == nil && vdir.lock != nil && len(entries)+len(refused) > 0 {
		return nil, fmt.Errorf("plugin lock file %s does not exist, while %s pins the Velero plugins: every plugin is pinned or none; pin them all with `lethe plugin lock`", Quote(c.LockFile), Quote(c.VeleroLockFile))
	}
	installed := slices.Clone(entries)
	installed = append(installed, vdir.installed...)
	for _, p := range refused {
		installed = append(installed, binEntry{path: p.Binary, exe: p.Binary})
	}
	if err := checkEnvBinaries(c.PluginEnv, c.Dir, installed); err != nil {
		return nil, err
	}
	if h.lock != nil {
		present := map[string]bool{}
		for _, be := range installed {
			present[be.name()] = true
		}
		var missing []string
		for _, name := range slices.Sorted(maps.Keys(h.lock.Plugins)) {
			if !present[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return nil, &LockedBinaryMissingError{Name: missing[0], More: missing[1:], Dir: c.Dir, Lock: c.LockFile}
		}
	}
	h.problems = append(refused, vdir.problems...)
	if c.SocketDir != "" {
		h.socketDir = c.SocketDir
	} else {
		sweepSocketDirs("/tmp", h.logger)
		if h.socketDir, err = os.MkdirTemp("/tmp", socketDirPrefix(os.Getpid())); err != nil {
			return nil, fmt.Errorf("plugin socket directory: %w", err)
		}
		h.ownSocket = true
	}
	if h.user != nil {
		if err := h.user.socketRoot(h.socketDir); err != nil {
			h.Close()
			return nil, err
		}
	}
	reaper.enable(h.logger)
	if !c.DisableCgroups {
		if dir, err := cgroupDir(); err != nil {
			h.logger.Debug("plugins run without a cgroup of their own", "error", err)
		} else {
			sweepCgroups(dir, h.logger)
			h.cgroupDir = dir
		}
	}
	var bins []*binary
	for _, be := range entries {
		b := &binary{h: h, path: be.path, exe: be.exe, display: be.name(), tail: newTail(c.StderrTailLines)}
		b.env = baseEnv(c.PluginEnv[be.name()], h.user.home())
		if h.lock != nil {
			e, ok := h.lock.Plugins[be.name()]
			if !ok {
				h.problems = append(h.problems, Problem{Binary: be.path, Err: &UnpinnedError{Binary: be.path, Lock: c.LockFile}})
				continue
			}
			b.checksum = e.SHA256
		}
		bins = append(bins, b)
	}
	bins = append(bins, h.veleroBinaries(vdir)...)
	h.discover(bins)
	for _, p := range h.problems {
		h.logger.Info("plugin binary refused; its plugins are not loaded", "binary", p.Binary, "plugins", p.Names, "error", p.Err)
	}
	return h, nil
}

// discover starts every binary concurrently and registers its plugins. A
// binary that fails to start, or serves an invalid or reserved name or
// version, becomes a Problem, and so do both binaries of a name that two
// serve; the other binaries load.
func (h *Host) discover(bins []*binary) {
	errs := make([]error, len(bins))
	found := make([][]Info, len(bins))
	var wg sync.WaitGroup
	for i, b := range bins {
		wg.Go(func() {
			found[i], errs[i] = b.discover()
		})
	}
	wg.Wait()
	owners := map[string][]int{} // plugin name -> binaries serving it
	for i := range bins {
		if errs[i] != nil {
			continue
		}
		for _, info := range found[i] {
			owners[info.Name] = append(owners[info.Name], i)
		}
	}
	for name, idx := range owners {
		if len(idx) < 2 {
			continue
		}
		paths := make([]string, len(idx))
		for k, i := range idx {
			paths[k] = Quote(bins[i].path)
		}
		for _, i := range idx {
			errs[i] = errors.Join(errs[i], fmt.Errorf("plugin %s is served by %d binaries, %s; refusing all of them: remove all but one", Quote(name), len(idx), strings.Join(paths, " and ")))
		}
	}
	for i, b := range bins {
		if errs[i] != nil {
			var names []string
			for _, info := range found[i] {
				names = append(names, info.Name)
			}
			if names == nil {
				names = b.names
			}
			b.shutdown()
			h.problems = append(h.problems, Problem{Binary: b.path, Names: names, Err: errs[i]})
			continue
		}
		h.binaries = append(h.binaries, b)
		for _, info := range found[i] {
			h.plugins[info.Name] = &entry{info: info, bin: b}
			h.infos = append(h.infos, info)
		}
	}
	slices.SortFunc(h.infos, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
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

// Close stops every plugin process and its process group: go-plugin's
// Shutdown call, then SIGTERM, then SIGKILL after KillGrace. Open sessions fail their remaining items. It is
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
	for _, b := range h.binaries {
		b.closeImage()
	}
	reaper.sweep(0, true, nil)
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
			return nil, fmt.Errorf("plugin binary %s does not serve TLS: it does not speak Lethe's automatic mTLS (%s); rebuild it against a current pkg/plugin (see docs/plugin-authoring.md)", Quote(b.path), plugin.MTLSFDEnv)
		}
		if strings.Contains(msg, "other than the one Lethe made") || strings.Contains(msg, "authentication handshake failed") {
			return nil, fmt.Errorf("plugin binary %s: refusing its TLS connection: %s", Quote(b.path), sanitizeMessage(msg))
		}
		return nil, fmt.Errorf("plugin binary %s: ListPlugins: %s", Quote(b.path), sanitizeMessage(msg))
	}
	var infos []Info
	var errs []error
	seen := map[string]bool{}
	for _, d := range list.GetPlugins() {
		if d.GetKind() != pluginv1.PluginKind_PLUGIN_KIND_DELETE_ITEM_ACTION {
			b.h.logger.Warn("ignoring a plugin of an unknown kind", "binary", b.path, "name", Quote(d.GetName()), "kind", d.GetKind().String())
			continue
		}
		name, err := plugin.NormalizeName(d.GetName())
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin binary %s: %w", Quote(b.path), err))
			continue
		}
		if err := plugin.CheckReserved(name); err != nil {
			errs = append(errs, fmt.Errorf("plugin binary %s: %w", Quote(b.path), err))
			continue
		}
		if err := plugin.ValidateVersion(d.GetVersion()); err != nil {
			errs = append(errs, fmt.Errorf("plugin %q (%s): %w", name, Quote(b.path), err))
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("plugin binary %s lists plugin %q twice", Quote(b.path), name))
			continue
		}
		seen[name] = true
		resp, err := p.stubs.Action.AppliesTo(ctx, &pluginv1.AppliesToRequest{Plugin: name})
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin %q (%s): AppliesTo: %s", name, Quote(b.path), sanitizeMessage(status.Convert(err).Message())))
			continue
		}
		sel := selectorFromProto(resp.GetSelector())
		resolved, unresolved := ResolveSelector(sel)
		m, err := resolved.Compile()
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin %q (%s): %w", name, Quote(b.path), err))
			continue
		}
		info := Info{
			Name:            name,
			Binary:          b.path,
			ProtocolVersion: p.protocol,
			Protocol:        ProtocolLethe,
			Version:         d.GetVersion(),
			Selector:        sel,
			Matcher:         m,
			Unresolved:      unresolved,
			MaxConcurrency:  int(cmp.Or(d.GetMaxConcurrency(), uint32(plugin.DefaultMaxConcurrency))),
			ChecksumStatus:  ChecksumUnlocked,
		}
		if b.velero {
			info.Protocol = ProtocolVelero
		}
		if b.checksum != "" {
			info.Checksum = b.checksum
			info.ChecksumStatus = ChecksumLocked
		}
		infos = append(infos, info)
	}
	if len(infos) == 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("plugin binary %s serves no DeleteItemAction plugin", Quote(b.path)))
	}
	return infos, errors.Join(errs...)
}

package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// DefaultMaxConcurrency is how many items a plugin executes at once when
// Plugin.MaxConcurrency is 0.
const DefaultMaxConcurrency = 8

// LogLevelEnv names the environment variable that sets a plugin's log level
// (trace, debug, info, warn, error). The default is info.
const LogLevelEnv = "LETHE_PLUGIN_LOG_LEVEL"

// Plugin is one named DeleteItemAction served by a binary.
type Plugin struct {
	// Name is "<dns-subdomain>/<name>", e.g. "example.com/ebs-snapshots". A
	// bare name "foo" means "lethe.io/foo", which is reserved for Lethe's own
	// plugins.
	Name string
	// Version is the plugin's own version, free-form (semver recommended).
	Version string
	// Action does the work.
	Action DeleteItemAction
	// MaxConcurrency caps how many Execute calls run at once on one stream.
	// 0 means DefaultMaxConcurrency.
	MaxConcurrency int
}

// ShutdownGrace is how long Serve, once asked to stop, waits for Execute
// calls in progress (their ctx is cancelled) and then for the plugin's
// child processes to exit after SIGTERM, before it returns and SIGKILLs
// what is left.
const ShutdownGrace = time.Second

// Serve serves the plugins to the Lethe host and returns when the host is
// done with the process, so that the deferred code of main runs. It is what
// a plugin binary's main calls. It exits the process with a clear message
// on stderr when the configuration is invalid (bad, reserved or duplicate
// names, a bad Version, a nil Action), or when the binary is run by hand
// rather than by the host.
//
// Serve returns when the host shuts the plugin down (go-plugin's Shutdown
// call, the host's first step), and on SIGTERM, which the host sends after
// that, and which Linux sends when the host dies, even by SIGKILL. Before
// it returns, the ctx of every Execute call in progress is cancelled, and
// every descendant process of the plugin is ended (SIGTERM, then SIGKILL
// after ShutdownGrace): on Linux the plugin is a child subreaper, so this
// includes processes that called setsid or were double-forked.
//
// Plugin logs go to stderr as JSON through hclog, which the host forwards
// into its own log under the plugin's name; use Logger(ctx) inside Execute.
func Serve(plugins ...*Plugin) {
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "plugin",
		Output:     os.Stderr, // the real stderr: go-plugin swaps os.Stderr later
		JSONFormat: true,
		Level:      hclog.LevelFromString(cmpOr(os.Getenv(LogLevelEnv), "info")),
	})
	set, err := newServers(logger, plugins)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lethe plugin: invalid configuration: %v\n", err)
		os.Exit(1)
	}
	becomeSubreaper()
	stopReaper := make(chan struct{})
	go reapOrphans(30*time.Second, stopReaper)
	// A write to a broken stderr (the host is gone) must fail, not kill the
	// process before it has ended its children.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	var srv atomic.Pointer[grpc.Server]
	served := make(chan struct{})
	go func() {
		select {
		case <-term:
		case <-served:
			return
		}
		killDescendants(ShutdownGrace)
		for range 100 { // the server may not exist yet
			if s := srv.Load(); s != nil {
				s.Stop()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		os.Exit(143) // terminated before it could serve
	}()
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{
			ProtocolVersion: {PluginSetKey: set},
		},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			s := NewGRPCServer(opts)
			srv.Store(s)
			return s
		},
		TLSProvider: serverTLS,
		Logger:      logger.Named("go-plugin"),
	})
	close(served)
	if s := srv.Load(); s != nil {
		s.Stop() // after Shutdown, it is stopped already; this cancels every stream
	}
	set.wait(ShutdownGrace)
	killDescendants(ShutdownGrace)
	close(stopReaper)
	signal.Stop(term)
}

// NewGRPCServer builds the gRPC server a plugin serves on, with Lethe's
// message size limits. Serve uses it; it is exported for plugins that call
// go-plugin themselves.
func NewGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts,
		grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.MaxSendMsgSize(MaxMessageSize),
		codecOption(),
	)
	s := grpc.NewServer(opts...)
	fastServers.Store(s, struct{}{})
	return s
}

// GRPCPlugin returns the go-plugin plugin that serves the given plugins, for
// binaries that call go-plugin's Serve themselves (to speak another protocol
// version, or in tests). Most plugins call Serve instead.
func GRPCPlugin(logger hclog.Logger, plugins ...*Plugin) (goplugin.Plugin, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return newServers(logger, plugins)
}

func newServers(logger hclog.Logger, plugins []*Plugin) (*grpcPlugin, error) {
	if len(plugins) == 0 {
		return nil, errors.New("no plugins to serve")
	}
	byName := make(map[string]*served, len(plugins))
	var errs []error
	for i, p := range plugins {
		if p == nil {
			errs = append(errs, fmt.Errorf("plugin #%d is nil", i+1))
			continue
		}
		name, err := NormalizeName(p.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := CheckReserved(name); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := ValidateVersion(p.Version); err != nil {
			errs = append(errs, fmt.Errorf("plugin %q: %w", name, err))
			continue
		}
		if p.Action == nil {
			errs = append(errs, fmt.Errorf("plugin %q: Action is nil", name))
			continue
		}
		if p.MaxConcurrency < 0 {
			errs = append(errs, fmt.Errorf("plugin %q: MaxConcurrency %d is negative", name, p.MaxConcurrency))
			continue
		}
		if _, dup := byName[name]; dup {
			errs = append(errs, fmt.Errorf("plugin %q is served twice", name))
			continue
		}
		byName[name] = &served{
			name:    name,
			version: p.Version,
			action:  p.Action,
			max:     cmpOr(p.MaxConcurrency, DefaultMaxConcurrency),
			logger:  logger.ResetNamed(name),
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	reg := &registry{byName: byName, names: names, logger: logger}
	for _, p := range byName {
		p.running = &reg.running
	}
	return &grpcPlugin{
		reg:    reg,
		info:   &infoServer{reg: reg},
		action: &actionServer{reg: reg},
	}, nil
}

func cmpOr[T comparable](vals ...T) T {
	var zero T
	for _, v := range vals {
		if v != zero {
			return v
		}
	}
	return zero
}

// Logger returns the logger of the plugin running Execute or AppliesTo:
// hclog, to stderr in JSON, which the host forwards under the plugin's
// name. Outside a plugin call it returns a logger that discards everything.
func Logger(ctx context.Context) hclog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(hclog.Logger); ok {
		return l
	}
	return hclog.NewNullLogger()
}

type loggerKey struct{}

func withLogger(ctx context.Context, l hclog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// oneLine flattens a message to one line for the wire.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(strings.ReplaceAll(s, "\r", " "), "\n", " ")), " ")
}

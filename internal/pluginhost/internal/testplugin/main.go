// Command testplugin is a misbehaving plugin for pluginhost's tests. It
// serves the plugins named by -names; what Execute does depends on the
// item's name:
//
//   - "panic": panics.
//   - "crash-once": exits the process, the first time only (a marker file
//     in -state remembers).
//   - "crash": exits the process every time, after a line on stderr.
//   - "hang": blocks forever, ignoring ctx.
//   - "wait-ctx": waits for ctx and returns its error.
//   - "spawn": starts a grandchild "sleep 300", writes its pid to
//     -state/grandchild.pid, and succeeds.
//   - "spawn-setsid": the same in a session of its own, pid in
//     -state/setsid.pid.
//   - "spawn-orphan": a shell that starts "sleep 300" in the background and
//     exits, so the sleep loses its parent; its pid in -state/orphan.pid.
//   - "daemon", "daemon-hang", "daemon-crash", "daemon-exit": double-forks a
//     daemon that ignores SIGTERM (a child in a session of its own starts
//     it and exits), appends its pid to -state/daemon.pid, then succeeds,
//     hangs, exits with 4, or exits with 0 (the SDK's cleanup skipped).
//   - "log": logs a warning.
//   - "blocked", "skip", "fail": the matching outcome.
//   - anything else: done.
//
// -handshake prints that line as its go-plugin handshake, "{dir}" replaced
// with its socket folder, then waits to be killed; with -symlink it first
// makes {dir}/link a symlink to that path.
//
// -tls misbehaves in the handshake: "own" serves TLS with a certificate of
// its own instead of the one the host sent; "line" reads the host's TLS
// material, then answers with go-plugin's AutoMTLS, which puts a
// certificate of its own in the handshake line's sixth field.
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/lethehq/lethe/pkg/plugin"
)

// stderr is the real stderr: go-plugin redirects os.Stderr once serving.
var stderr = os.Stderr

func main() {
	names := flag.String("names", "example.com/"+filepath.Base(os.Args[0]), "comma-separated plugin names (default: example.com/ and the file name it runs as)")
	state := flag.String("state", os.TempDir(), "state directory")
	resources := flag.String("resources", "", "comma-separated included resources")
	protocol := flag.Int("protocol", plugin.ProtocolVersion, "protocol version to speak")
	longLine := flag.Int("long-stderr", 0, "write a line of this many bytes to stderr at start")
	refuseIf := flag.String("refuse-start-if", "", "exit at start, with a line on stderr, while this file exists")
	touch := flag.String("touch", "", "create this file at start (proves the binary ran)")
	tlsMode := flag.String("tls", "", `misbehave in the TLS handshake: "own" or "line"`)
	raw := flag.String("raw", "", "serve these comma-separated names without the SDK's checks, and without TLS")
	version := flag.String("version", "v0.0.1-test", "version to report")
	onExit := flag.String("on-exit", "", "create this file once Serve returns (proves deferred code runs)")
	handshake := flag.String("handshake", "", "print this handshake line ({dir}: the socket folder), then wait")
	symlink := flag.String("symlink", "", "with -handshake: make {dir}/link a symlink to this path first")
	daemon := flag.Bool("daemon", false, "be the daemon: ignore SIGTERM and sleep")
	forkDaemon := flag.String("fork-daemon", "", "start a daemon, append its pid to this file, and exit")
	ignoreTerm := flag.Bool("ignore-term", false, "ignore SIGTERM and SIGPIPE (with -raw)")
	daemonAtStart := flag.String("daemon-at-start", "", "with -raw: double-fork a daemon at start, its pid appended to this file")
	flag.Parse()
	switch {
	case *daemon:
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		time.Sleep(time.Hour)
		return
	case *forkDaemon != "":
		if err := startDaemon(*forkDaemon); err != nil {
			fmt.Fprintln(stderr, err)
			os.Exit(1)
		}
		return
	case *handshake != "":
		dir := os.Getenv("PLUGIN_UNIX_SOCKET_DIR")
		if *symlink != "" {
			if err := os.Symlink(*symlink, filepath.Join(dir, "link")); err != nil {
				fmt.Fprintln(stderr, err)
				os.Exit(1)
			}
		}
		fmt.Println(strings.ReplaceAll(*handshake, "{dir}", dir))
		time.Sleep(time.Hour)
		return
	}
	if *ignoreTerm {
		// SIGPIPE too: a write to the dead host's pipes must not end it.
		signal.Ignore(syscall.SIGTERM, syscall.SIGPIPE)
	}
	if *daemonAtStart != "" {
		if err := doubleFork(*daemonAtStart); err != nil {
			fmt.Fprintln(stderr, err)
			os.Exit(1)
		}
	}
	if *onExit != "" {
		defer func() { _ = os.WriteFile(*onExit, nil, 0o644) }()
	}
	if *raw != "" {
		serveRaw(*raw, *version)
		return
	}

	if *touch != "" {
		_ = os.WriteFile(*touch, nil, 0o644)
	}
	if *refuseIf != "" {
		if _, err := os.Stat(*refuseIf); err == nil {
			fmt.Fprintln(stderr, "refusing to start: broken on purpose")
			os.Exit(5)
		}
	}

	if *longLine > 0 {
		fmt.Fprintln(os.Stderr, strings.Repeat("x", *longLine))
	}
	var sel plugin.ResourceSelector
	if *resources != "" {
		sel.IncludedResources = strings.Split(*resources, ",")
	}
	var ps []*plugin.Plugin
	for _, n := range strings.Split(*names, ",") {
		ps = append(ps, &plugin.Plugin{Name: n, Version: *version, Action: &action{state: *state, sel: sel}, MaxConcurrency: 4})
	}
	if *protocol == plugin.ProtocolVersion && *tlsMode == "" {
		plugin.Serve(ps...)
		return
	}
	var tlsProvider func() (*tls.Config, error)
	switch *tlsMode {
	case "own":
		tlsProvider = ownTLS
	case "line":
		clientCert := ""
		if os.Getenv(plugin.MTLSFDEnv) != "" {
			clientCert = readHostBundle()["client_cert"]
		} else { // mTLS is off: any certificate makes go-plugin send one back
			cfg, err := ownTLS()
			if err != nil {
				panic(err)
			}
			clientCert = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cfg.Certificates[0].Certificate[0]}))
		}
		_ = os.Setenv("PLUGIN_CLIENT_CERT", clientCert)
	}
	p, err := plugin.GRPCPlugin(nil, ps...)
	if err != nil {
		panic(err)
	}
	hs := plugin.Handshake
	hs.ProtocolVersion = uint(*protocol)
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: map[int]goplugin.PluginSet{*protocol: {plugin.PluginSetKey: p}},
		GRPCServer:       plugin.NewGRPCServer,
		TLSProvider:      tlsProvider,
	})
}

// readHostBundle reads the TLS material the host sent, as the SDK does.
func readHostBundle() map[string]string {
	fd, err := strconv.Atoi(os.Getenv(plugin.MTLSFDEnv))
	if err != nil {
		panic(err)
	}
	_ = os.Unsetenv(plugin.MTLSFDEnv)
	f := os.NewFile(uintptr(fd), "mtls")
	defer f.Close()
	var b map[string]string
	if err := json.NewDecoder(f).Decode(&b); err != nil {
		panic(err)
	}
	return b
}

// ownTLS serves with a fresh certificate of its own, trusting any client.
func ownTLS() (*tls.Config, error) {
	if os.Getenv(plugin.MTLSFDEnv) != "" {
		_ = readHostBundle()
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:   tls.RequireAnyClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

type action struct {
	state string
	sel   plugin.ResourceSelector
}

func (a *action) AppliesTo(context.Context) (plugin.ResourceSelector, error) { return a.sel, nil }

func (a *action) Execute(ctx context.Context, in *plugin.DeleteItemActionInput) error {
	switch in.Item.Name {
	case "panic":
		panic("test panic")
	case "crash-once":
		marker := filepath.Join(a.state, "crashed-once")
		if _, err := os.Stat(marker); err != nil {
			_ = os.WriteFile(marker, nil, 0o644)
			fmt.Fprintln(stderr, "crash-once: exiting")
			os.Exit(3)
		}
	case "crash":
		fmt.Fprintln(stderr, "boom: crashing on purpose")
		time.Sleep(10 * time.Millisecond)
		os.Exit(4)
	case "hang":
		select {}
	case "wait-ctx":
		<-ctx.Done()
		return ctx.Err()
	case "spawn":
		cmd := exec.Command("sleep", "300")
		if err := cmd.Start(); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(a.state, "grandchild.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	case "spawn-setsid":
		cmd := exec.Command("sleep", "300")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(a.state, "setsid.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	case "spawn-orphan":
		pidFile := filepath.Join(a.state, "orphan.pid")
		cmd := exec.Command("sh", "-c", `setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > "$1"`, "sh", pidFile)
		return cmd.Run()
	case "daemon", "daemon-hang", "daemon-crash", "daemon-exit":
		if err := doubleFork(filepath.Join(a.state, "daemon.pid")); err != nil {
			return err
		}
		switch in.Item.Name {
		case "daemon-hang":
			select {}
		case "daemon-crash":
			os.Exit(4)
		case "daemon-exit":
			os.Exit(0)
		}
	case "log":
		plugin.Logger(ctx).Warn("hello from the plugin", "item", in.Item.Name)
	case "blocked":
		return plugin.Blocked(time.Minute, "locked")
	case "skip":
		return plugin.Skipped("not mine")
	case "fail":
		return errors.New("failed on purpose")
	}
	return nil
}

// doubleFork starts a child in a session of its own, which starts the
// daemon and exits: the daemon loses its parent, as a daemonising program's
// does. The daemon's pid is appended to pidFile.
func doubleFork(pidFile string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "-fork-daemon="+pidFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stderr = stderr
	return cmd.Run()
}

// startDaemon starts the daemon and appends its pid to pidFile, without
// waiting for it.
func startDaemon(pidFile string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "-daemon")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	// Once it ignores SIGTERM.
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		return fmt.Errorf("the daemon did not start: %w", err)
	}
	f, err := os.OpenFile(pidFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, cmd.Process.Pid)
	return err
}

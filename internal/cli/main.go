package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/deletion"
	"github.com/lethehq/lethe/internal/termtext"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// Streams are the command's standard streams and environment.
type Streams struct {
	In     io.Reader
	Out    io.Writer
	Err    io.Writer
	Getenv func(string) string
	// InteractiveIn reports whether In is a terminal a person types at.
	InteractiveIn bool
	// InteractiveErr reports whether Err is a terminal (progress bars).
	InteractiveErr bool
	// InteractiveOut reports whether Out is a terminal (lethe status
	// redraws it).
	InteractiveOut bool
}

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitIncomplete  = 3
	exitNotFound    = 4 // no such resource, or it was purged
	exitInterrupted = 130
)

// exitPlugins: refused because a plugin the work needs is missing or
// cannot load, or no plugin is installed; nothing changed.
const exitPlugins = 5

// errIncomplete marks a command that worked but left work undone (items
// failed or blocked); Main exits with exitIncomplete.
var errIncomplete = errors.New("incomplete")

// usageError marks bad input on the command line.
type usageError struct{ error }

// Main runs the CLI with the process's streams and returns the exit code.
// The first SIGINT or SIGTERM cancels the running command gracefully
// (progress is saved, plugins are stopped); a second one exits at once.
func Main(args []string) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	aborts := &abortHooks{}
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		if !aborts.quiet.Load() {
			fmt.Fprintf(os.Stderr, "\nlethe: %s: stopping; press Ctrl-C again to abort\n", unix.SignalName(sig.(syscall.Signal)))
		}
		cancel(fmt.Errorf("interrupted (%s)", unix.SignalName(sig.(syscall.Signal))))
		if _, ok := <-sigs; ok {
			aborts.run()
			os.Exit(exitInterrupted)
		}
	}()
	s := Streams{
		In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv,
		InteractiveIn:  term.IsTerminal(int(os.Stdin.Fd())),
		InteractiveErr: term.IsTerminal(int(os.Stderr.Fd())),
		InteractiveOut: term.IsTerminal(int(os.Stdout.Fd())),
	}
	code := Run(ctx, args, s, aborts)
	if code != exitOK && ctx.Err() != nil {
		return exitInterrupted
	}
	return code
}

// Run runs the CLI and returns the exit code. Errors are printed as one
// line on s.Err.
func Run(ctx context.Context, args []string, s Streams, aborts *abortHooks) int {
	if aborts == nil {
		aborts = &abortHooks{}
	}
	ctx = catalog.WithActor(ctx, cliActor())
	root, a := newRoot(s, aborts)
	root.SetArgs(args)
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	err := root.ExecuteContext(ctx)
	err = errors.Join(err, a.close())
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errIncomplete) {
		return exitIncomplete
	}
	interrupted := errors.Is(err, deletion.ErrInterrupted)
	msg := strings.TrimSpace(err.Error())
	// One line. cobra's own errors break lines and indent with a tab
	// ("for \"lethe\"\n\nDid you mean this?\n\tbackup"): plain spaces.
	msg = strings.ReplaceAll(msg, "\n\t", " ")
	msg = strings.ReplaceAll(msg, "\n\n", " ")
	msg = strings.ReplaceAll(msg, "\n", " ")
	// The sites that build errors quote what they name; an error that
	// still carries a raw control (from a deeper layer) is quoted whole.
	if !termtext.Plain(msg) {
		msg = termtext.Quote(msg)
	}
	fmt.Fprintf(s.Err, "Error: %s\n", msg)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(msg) {
		fmt.Fprintf(s.Err, "Run '%s --help' for usage.\n", commandPath(root, args))
		return exitUsage
	}
	var ce exitCodeError
	if errors.As(err, &ce) {
		return ce.code
	}
	var nf *backup.NotFoundError
	var rnf retryNotFound
	if errors.As(err, &nf) || errors.As(err, &rnf) {
		return exitNotFound
	}
	if pluginRefusal(err) {
		return exitPlugins
	}
	if interrupted {
		return exitInterrupted // stopped with its progress saved
	}
	return exitError
}

// cliActor names the person at the CLI in the audit log: "cli:<user>".
func cliActor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	return "cli:" + name
}

func isCobraUsage(msg string) bool {
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "requires at most", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

func commandPath(root *cobra.Command, args []string) string {
	c, _, err := root.Find(args)
	if err != nil || c == nil {
		return "lethe"
	}
	return c.CommandPath()
}

// abortHooks run when the user aborts with a second signal: they kill
// plugin processes so nothing outlives lethe.
type abortHooks struct {
	mu  sync.Mutex
	fns []func()
	// quiet: the first signal ends the command normally (a watch), so
	// Main does not announce it.
	quiet atomic.Bool
}

func (a *abortHooks) add(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fns = append(a.fns, f)
}

func (a *abortHooks) run() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, f := range a.fns {
		f()
	}
}

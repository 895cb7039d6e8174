package pluginhost

import (
	"bytes"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// pluginLogger is the logger go-plugin gets. It names a binary's log lines
// after the plugins it serves, as known at the time of each line, and
// tones down go-plugin's own messages about exits the host caused or
// already reported.
type pluginLogger struct {
	hclog.Logger
	b *binary
}

func (l pluginLogger) Named(string) hclog.Logger { return lineNamer(l) }

func (l pluginLogger) Error(msg string, args ...any) {
	if msg == "plugin process exited" {
		l.Logger.Info(msg, args...)
		return
	}
	l.Logger.Error(msg, args...)
}

func (l pluginLogger) Warn(msg string, args ...any) {
	if msg == "plugin failed to exit gracefully" {
		l.Logger.Debug(msg, args...)
		return
	}
	l.Logger.Warn(msg, args...)
}

// lineNamer logs each line under the binary's current display name.
type lineNamer struct {
	hclog.Logger
	b *binary
}

func (l lineNamer) named() hclog.Logger {
	l.b.mu.Lock()
	name := l.b.display
	l.b.mu.Unlock()
	// Before the plugins are known, name is the binary's file name, which
	// may carry terminal escapes: quoted, never written raw.
	return l.Logger.Named(Quote(name))
}

func (l lineNamer) Log(level hclog.Level, msg string, args ...any) {
	l.named().Log(level, msg, args...)
}
func (l lineNamer) Trace(msg string, args ...any) { l.named().Trace(msg, args...) }
func (l lineNamer) Debug(msg string, args ...any) { l.named().Debug(msg, args...) }
func (l lineNamer) Info(msg string, args ...any)  { l.named().Info(msg, args...) }
func (l lineNamer) Warn(msg string, args ...any)  { l.named().Warn(msg, args...) }
func (l lineNamer) Error(msg string, args ...any) { l.named().Error(msg, args...) }

// tail keeps the last lines a binary wrote to stderr. Long lines are
// truncated; it never fails a write.
type tail struct {
	mu   sync.Mutex
	max  int
	ring []string
	cur  []byte
}

const tailLineMax = 512

func newTail(n int) *tail { return &tail{max: n} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range p {
		if c == '\n' {
			t.pushLH()
			continue
		}
		if len(t.cur) < tailLineMax {
			t.cur = append(t.cur, c)
		} else if len(t.cur) == tailLineMax {
			t.cur = append(t.cur, "…"...)
		}
	}
	return len(p), nil
}

func (t *tail) pushLH() {
	line := strings.TrimSpace(sanitizeMessage(string(t.cur)))
	t.cur = t.cur[:0]
	if line == "" {
		return
	}
	t.ring = append(t.ring, line)
	if len(t.ring) > t.max {
		t.ring = t.ring[len(t.ring)-t.max:]
	}
}

func (t *tail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.ring...)
	if len(t.cur) > 0 {
		out = append(out, sanitizeMessage(string(t.cur)))
	}
	return out
}

// lineLogger logs what a plugin writes to its os.Stdout or os.Stderr
// (go-plugin forwards them over gRPC), one log entry per line. Lines over
// 64 KiB are split.
type lineLogger struct {
	mu   sync.Mutex
	log  func(string, ...any)
	tail *tail
	buf  []byte
}

const lineLoggerMax = 64 << 10

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tail != nil {
		_, _ = l.tail.Write(p)
	}
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			if len(l.buf) >= lineLoggerMax {
				l.log(string(l.buf))
				l.buf = l.buf[:0]
			}
			return len(p), nil
		}
		if line := strings.TrimRight(string(l.buf[:i]), "\r"); line != "" {
			l.log(line)
		}
		l.buf = l.buf[i+1:]
	}
}

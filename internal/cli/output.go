package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

// counted is n and the noun that counts it: "1 item", "3 items", "0
// items" (many is the plural: "binaries").
func counted[T ~int | ~int64](n T, one, many string) string {
	return fmt.Sprintf("%d %s", n, noun(n, one, many))
}

// noun is the noun that counts n: one for 1, many otherwise.
func noun[T ~int | ~int64](n T, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// isAre is the verb that agrees with a count of n.
func isAre[T ~int | ~int64](n T) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// printStructured writes v as JSON or YAML. Neither carries a raw
// control or bidi character: encoding/json escapes the C0 controls but
// writes DEL, the C1 controls and the bidi controls as they are, so
// escapeJSON escapes them; the YAML encoder refuses C0 controls and writes
// the others raw, so a document that holds one is written in YAML's flow
// form, which is the escaped JSON (a YAML parser reads the same values).
func printStructured(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		// The YAML encoder refuses C0 controls; it writes the rest raw.
		if y, err := yaml.JSONToYAML(b); err == nil && plainLines(y) {
			_, err = w.Write(y)
			return err
		}
	}
	_, err = fmt.Fprintf(w, "%s\n", escapeJSON(b))
	return err
}

// plainLines reports whether every line of b is termtext.Plain.
func plainLines(b []byte) bool {
	for line := range strings.SplitSeq(string(b), "\n") {
		if !termtext.Plain(line) {
			return false
		}
	}
	return true
}

// escapeJSON rewrites every rune of JSON text that does not print as
// itself (and is not the newline or space of its indentation) as a \u
// escape. Outside strings JSON holds only printable ASCII and that
// whitespace, so only string contents change, and they decode the same.
func escapeJSON(b []byte) []byte {
	if plainLines(b) {
		return b
	}
	var out bytes.Buffer
	s := string(b)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\n' || termtext.Plain(s[i:i+n]):
			out.WriteString(s[i : i+n])
		case r == utf8.RuneError && n == 1:
			out.WriteString(`\ufffd`) // not UTF-8: what encoding/json writes for it
		default:
			for _, u := range utf16.AppendRune(nil, r) {
				fmt.Fprintf(&out, `\u%04x`, u)
			}
		}
		i += n
	}
	return out.Bytes()
}

// Text output (tables, plain lines, the Error line) shows every string
// that did not come from Lethe itself (a name, a namespace, a label, a
// path, a message read back from the catalog, a name typed on the command
// line) through termtext.Quote: as it is when it is plain text, else
// Go-quoted, so that no control byte or bidi control reaches the terminal.
// JSON and YAML escape by themselves.

// quoteAll is termtext.Quote of each string.
func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = termtext.Quote(s)
	}
	return out
}

// keyText shows a catalog key: kind/namespace/name, quoted as one string
// when any part is not plain text.
func keyText(k catalog.Key) string { return termtext.Quote(k.String()) }

// logWriter keeps raw controls and forged lines out of the log on
// stderr. hclog escapes a value that holds a space or a non-ASCII rune,
// but writes the message, and a value that spans lines, as they are (its
// continuation lines begin with two spaces). A text entry (one Write)
// with a control, or with a line break that does not begin such a
// continuation line, is written as one line through termtext.Quote; a JSON
// entry is escaped as -o json is.
type logWriter struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.json {
		_, err := l.w.Write(escapeJSON(p))
		return len(p), err
	}
	entry := strings.TrimSuffix(string(p), "\n")
	safe := plainLines(p)
	for i, line := range strings.Split(entry, "\n") {
		if i > 0 && !strings.HasPrefix(line, "  ") {
			safe = false // a line break in the message: a forged line
		}
	}
	if safe {
		return l.w.Write(p)
	}
	_, err := io.WriteString(l.w, termtext.Quote(entry)+"\n")
	return len(p), err
}

// table writes aligned columns.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)}
	t.row(headers...)
	return t
}

func (t *table) row(cols ...string) { fmt.Fprintln(t.tw, strings.Join(cols, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// human formats a duration briefly: 45s, 12m, 3h20m, 4d2h.
func human(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
		if d < 0 { // the most negative duration has no opposite (time.Sub saturates there)
			d = math.MaxInt64
		}
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	}
	if neg {
		return "-" + s
	}
	return s
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

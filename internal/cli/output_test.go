package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/lethehq/lethe/internal/termtext/termtexttest"
)

// TestLogLinesCarryNoRawControl: hclog writes a log message, and a value
// that spans lines, as they are; the log writer quotes such a line, in
// text and in JSON format.
func TestLogLinesCarryNoRawControl(t *testing.T) {
	for _, format := range []bool{false, true} {
		var buf bytes.Buffer
		log := hclog.New(&hclog.LoggerOptions{Name: "lethe", Output: &logWriter{w: &buf, json: format}, JSONFormat: format})
		for _, h := range termtexttest.Hostile {
			log.Warn("item "+h+" failed", "item", h, "plugin", "p\n"+termtexttest.ForgedLine+"\x1b[2K")
		}
		out := buf.String()
		require.Equal(t, -1, termtexttest.RawControl(out), "json=%v: %q", format, out)
		for line := range strings.SplitSeq(out, "\n") {
			require.False(t, strings.HasPrefix(line, termtexttest.ForgedLine), "json=%v: a forged line:\n%s", format, out)
		}
		if format {
			for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(line), &m), "an escaped JSON log line is still JSON: %q", line)
			}
		}
	}
}

func TestLogLinesThatArePlainAreWrittenAsTheyAre(t *testing.T) {
	var direct, through bytes.Buffer
	opts := func(w io.Writer) *hclog.LoggerOptions {
		return &hclog.LoggerOptions{Name: "lethe", Output: w, TimeFn: func() time.Time { return time.Unix(0, 0) }}
	}
	hclog.New(opts(&direct)).Warn("plugin stopped", "plugin", "example.com/ebs", "stderr", "line one\nline two")
	hclog.New(opts(&logWriter{w: &through})).Warn("plugin stopped", "plugin", "example.com/ebs", "stderr", "line one\nline two")
	require.Equal(t, direct.String(), through.String())
	require.Contains(t, through.String(), "\n  | line two\n", "a value that spans lines keeps hclog's form")
}

// TestStructuredOutputEscapesWhatTheEncodersLeaveRaw: encoding/json writes
// DEL, C1 and bidi controls raw, and the YAML encoder refuses C0 controls;
// -o json and -o yaml carry none of them raw and decode to the same values.
func TestStructuredOutputEscapesWhatTheEncodersLeaveRaw(t *testing.T) {
	type row struct {
		Name string `json:"name"`
	}
	for _, h := range termtexttest.Hostile {
		for _, format := range []string{"json", "yaml"} {
			var buf bytes.Buffer
			require.NoError(t, printStructured(&buf, format, []row{{Name: h}, {Name: "plain"}}))
			require.Equal(t, -1, termtexttest.RawControl(buf.String()), "%s of %q: %q", format, h, buf.String())
			var back []row
			require.NoError(t, yaml.Unmarshal(buf.Bytes(), &back), "%s of %q: %q", format, h, buf.String())
			want := strings.ToValidUTF8(h, "\uFFFD")
			require.Equal(t, []row{{Name: want}, {Name: "plain"}}, back, format)
		}
	}
	var buf bytes.Buffer
	require.NoError(t, printStructured(&buf, "yaml", []row{{Name: "plain"}}))
	require.Equal(t, "- name: plain\n", buf.String(), "plain values keep YAML's block form")
}

// TestWatchRowsStayAlignedWithTheHeaderAboveThem: get -w and backup list
// -w print rows one at a time; each row's columns start where the header
// above it puts them, also when a later row is wider than the listing
// (the header is then printed again, widened, above it).
func TestWatchRowsStayAlignedWithTheHeaderAboveThem(t *testing.T) {
	var buf bytes.Buffer
	st := &streamTable{w: &buf}
	require.NoError(t, st.print([]string{"NAMESPACE", "NAME", "PHASE", "AGE"}, []string{"shop", "orders", "Active", "1s"}))
	require.NoError(t, st.print([]string{"shop", "users", "Deleting (3/14)", "2s"}))
	require.NoError(t, st.print([]string{"a-namespace-longer-than-its-floor", "a-name-longer-than-the-floor-of-names", "Active", "3s"}))
	require.NoError(t, st.print([]string{"shop", "x", "Active", "a last cell of any length"}))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 6, buf.String())
	starts := func(line string) []int {
		var out []int
		for i := range line {
			if line[i] != ' ' && (i == 0 || strings.HasSuffix(line[:i], "   ")) {
				out = append(out, i)
			}
		}
		return out
	}
	var header []int
	for _, l := range lines {
		if strings.HasPrefix(l, "NAMESPACE") {
			header = starts(l)
			continue
		}
		assert.Equal(t, header, starts(l), "%q is not aligned with the header above it:\n%s", l, buf.String())
	}
	assert.Equal(t, 2, strings.Count(buf.String(), "NAMESPACE"), "the wider row printed the header again:\n%s", buf.String())
}

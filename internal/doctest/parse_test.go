package doctest

import (
	"fmt"
	"regexp"
	"strings"
)

// block is one fenced block of a markdown file.
type block struct {
	file  string
	line  int    // of the opening fence
	lang  string // sh, console, "" (untagged), go, yaml, ...
	lines []string
	skip  string // the reason of <!-- doctest: skip REASON -->
	// output: <!-- doctest: output -->, the block is the output of the
	// last command run before it.
	output bool
	// writeTo: <!-- doctest: file NAME -->, the block is written to the
	// file NAME (in the working folder) where it stands, as the reader
	// would save it.
	writeTo string
}

var (
	fenceRe  = regexp.MustCompile("^(\\s*)```\\s*([A-Za-z0-9_-]*)\\s*$")
	markerRe = regexp.MustCompile(`^<!--\s*doctest:\s*(skip|output|file)\b\s*(.*?)\s*-->\s*$`)
	// exitRe reads the exit code a command's comment names: "# exit 3:
	// ...", "# refused, exit 5: ...".
	exitRe = regexp.MustCompile(`#.*\bexit (\d+)\b`)
	// commandRe: a line that runs lethe, possibly after variable
	// assignments (LETHE_PLUGIN_ENV=... lethe server).
	commandRe = regexp.MustCompile(`^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*lethe(\s|$)`)
	heredocRe = regexp.MustCompile(`<<-?\s*'?"?([A-Za-z_]+)'?"?`)
)

// parse reads the fenced blocks of a markdown file, with their markers.
func parse(file, text string) ([]block, error) {
	var out []block
	lines := strings.Split(text, "\n")
	marker, markerLine := "", 0
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := markerRe.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			marker, markerLine = m[1]+" "+m[2], i+1
			if (m[1] == "skip" || m[1] == "file") && m[2] == "" {
				return nil, fmt.Errorf("%s:%d: <!-- doctest: %s --> needs an argument", file, i+1, m[1])
			}
			continue
		}
		m := fenceRe.FindStringSubmatch(l)
		if m == nil {
			if strings.TrimSpace(l) != "" && marker != "" {
				return nil, fmt.Errorf("%s:%d: the doctest marker must come right before a fenced block", file, markerLine)
			}
			continue
		}
		b := block{file: file, line: i + 1, lang: m[2]}
		indent := m[1]
		j := i + 1
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			b.lines = append(b.lines, strings.TrimPrefix(lines[j], indent))
		}
		if j == len(lines) {
			return nil, fmt.Errorf("%s:%d: unclosed fenced block", file, i+1)
		}
		switch {
		case strings.HasPrefix(marker, "skip "):
			b.skip = strings.TrimPrefix(marker, "skip ")
		case strings.HasPrefix(marker, "output"):
			b.output = true
		case strings.HasPrefix(marker, "file "):
			b.writeTo = strings.TrimPrefix(marker, "file ")
		}
		marker = ""
		out = append(out, b)
		i = j
	}
	return out, nil
}

// runnable: the block's commands run.
func (b block) runnable() bool { return b.skip == "" && (b.lang == "sh" || b.lang == "console") }

// holdsCommands: an untagged block that shows commands, which must then
// be tagged (or marked skip).
func (b block) holdsCommands() bool {
	if b.lang != "" || b.output || b.skip != "" || b.writeTo != "" {
		return false
	}
	for _, l := range b.lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "$ ") || commandRe.MatchString(t) {
			return true
		}
	}
	return false
}

// command is one command a doc shows, as the script runs it.
type command struct {
	id     int
	file   string
	line   int
	text   string // the shell text, continuation lines and here-documents included
	want   int    // exit code
	server bool   // lethe server in the foreground: stopped after a while
	// expect is the output the doc shows (nil: none shown).
	expect []string
}

func (c *command) String() string {
	return fmt.Sprintf("%s:%d: %s", c.file, c.line, c.text)
}

func wantCode(text string) int {
	code := 0
	for _, l := range strings.Split(text, "\n") {
		if m := exitRe.FindStringSubmatch(l); m != nil {
			_, _ = fmt.Sscan(m[1], &code)
		}
	}
	return code
}

// isServer: a foreground lethe server, which the docs run "in another
// terminal" or stop with Ctrl-C.
func isServer(text string) bool {
	first := strings.TrimSpace(strings.SplitN(text, "\n", 2)[0])
	first = assignRe.ReplaceAllString(first, "")
	return (first == "lethe server" || strings.HasPrefix(first, "lethe server ")) && !strings.Contains(stripComment(text), "&")
}

var assignRe = regexp.MustCompile(`^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*`)

// stripComment drops a trailing # comment of a one-line command (a rough
// cut: a # inside quotes is not a comment).
func stripComment(s string) string {
	if i := strings.Index(s, " #"); i >= 0 {
		return s[:i]
	}
	return s
}

// takeCommand reads one command from lines[i:]: the line, its backslash
// continuations and the bodies of its here-documents. It returns the
// command and the index of the line after it.
func takeCommand(lines []string, i int) (string, int) {
	var text []string
	var docs []string
	for ; i < len(lines); i++ {
		l := lines[i]
		text = append(text, l)
		for _, m := range heredocRe.FindAllStringSubmatch(stripComment(l), -1) {
			docs = append(docs, m[1])
		}
		if !strings.HasSuffix(strings.TrimSpace(stripComment(l)), "\\") {
			break
		}
	}
	i++
	for _, end := range docs {
		for ; i < len(lines); i++ {
			text = append(text, lines[i])
			if strings.TrimSpace(lines[i]) == end {
				i++
				break
			}
		}
	}
	return strings.Join(text, "\n"), i
}

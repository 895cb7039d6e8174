// Package termtexttest holds a corpus of hostile strings for tests of what
// reaches a terminal.
package termtexttest

// Hostile is a corpus of names that must never reach a terminal raw: each
// would move the cursor, rewrite a line, set the clipboard, make a link,
// ring the bell, reorder text or break a line if printed as it is.
var Hostile = []string{
	"evil\x1b[31mred\x1b[0m", // CSI colour
	"line\rOVERWRITE",        // carriage return
	"two\n" + ForgedLine,     // line feed: a forged log line
	"\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07", // OSC 8 hyperlink, BEL
	"\x1b]52;c;ZXZpbA==\x07",                            // OSC 52: set the clipboard
	"bell\x07",                                          // BEL
	"abc\u202egnp.exe",                                  // RIGHT-TO-LEFT OVERRIDE
	"bad\xffutf8",                                       // not UTF-8
	"nul\x00byte",                                       // NUL
	"del\x7f",                                           // DEL
	"c1\u009b31m",                                       // C1 CSI, as a rune
	"c1raw\x9b31m",                                      // C1 CSI, as a lone byte
	"lrm\u200e", "alm\u061c", "isolate\u2066x\u2069",    // other bidi controls
}

// ForgedLine is what the corpus's line feed would start a line with.
const ForgedLine = "level=INFO msg=FORGED"

// RawControl returns the index of the first byte of out that a terminal
// would interpret, other than the newline and the tab, or -1: a C0
// control, DEL, a C1 control (as a lone byte or UTF-8 encoded), a bidi
// control, or a byte that is not UTF-8.
func RawControl(out string) int {
	for i, r := range out {
		switch {
		case r == '\n' || r == '\t':
		case r == 0xfffd && (len(out) < i+3 || out[i:i+3] != "\uFFFD"):
			return i // not UTF-8
		case r < 0x20, r >= 0x7f && r <= 0x9f,
			r == 0x061c, r == 0x200e, r == 0x200f,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return i
		}
	}
	return -1
}

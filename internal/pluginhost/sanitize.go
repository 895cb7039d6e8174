package pluginhost

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxMessageBytes caps a result message from a plugin, and any other text a
// plugin sends that the host stores or shows.
const MaxMessageBytes = 4 << 10

// sanitizeMessage makes text that came from a plugin safe to store and
// show: invalid UTF-8 becomes U+FFFD, control and format characters
// (terminal escapes, bidi overrides, newlines) become spaces, runs of
// spaces collapse, and the result is cut at MaxMessageBytes, ending in "…".
func sanitizeMessage(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean && len(s) <= MaxMessageBytes && !strings.Contains(s, "  ") {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), MaxMessageBytes+len("…")))
	space := false
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) {
			if space {
				continue
			}
			r, space = ' ', true
		} else {
			space = false
		}
		if b.Len()+utf8.RuneLen(r) > MaxMessageBytes-len("…") {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}

// Package termtext decides how a string that did not come from Lethe itself
// (an item name, a namespace, a label, a catalog row, a name typed on the
// command line, a path) reaches an operator's terminal: as it is when it is
// plain printable text, else Go-quoted, so that no control byte, terminal
// escape or bidi override is ever interpreted. Quote is the one function
// every text output uses for such strings; Control is the rule the places
// where names enter (tarballs, Velero metadata) refuse.
//
// It imports nothing of Lethe's, so that any package may use it.
package termtext

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Quote returns s as it is when every rune of it prints as itself, and
// strconv.Quote(s) otherwise: when s is not valid UTF-8 or holds a rune
// that is not graphic (C0 and C1 controls, DEL, bidi and other format
// characters, separators other than the ASCII space). A string that
// begins with '"' is quoted too, so that a printed value begins with '"'
// exactly when it was quoted. The empty string stays empty.
func Quote(s string) string {
	if s != "" && s[0] == '"' || !Plain(s) {
		return strconv.Quote(s)
	}
	return s
}

// Plain reports whether s is valid UTF-8 made only of runes that print as
// themselves (strconv.IsPrint, which counts the ASCII space and no other
// space).
func Plain(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || !strconv.IsPrint(r) {
			return false
		}
		i += n
	}
	return true
}

// Control returns the first rune of s that no Kubernetes name or
// namespace can hold, and true; or 0 and false when there is none. Those
// runes are the C0 controls, DEL, the C1 controls and the bidi controls
// (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069). Bytes that are
// not valid UTF-8 count too, and are returned as utf8.RuneError.
func Control(s string) (rune, bool) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || IsControl(r) {
			return r, true
		}
		i += n
	}
	return 0, false
}

// IsControl reports whether r is one of the runes Control refuses.
func IsControl(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// Describe names the rune Control found, for an error message:
// "U+001B (a control character)", "U+202E (a bidi control)", "a byte that
// is not UTF-8".
func Describe(r rune) string {
	switch {
	case r == utf8.RuneError:
		return "a byte that is not UTF-8"
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return fmt.Sprintf("%U (a control character)", r)
	}
	return fmt.Sprintf("%U (a bidi control)", r)
}

package manifest

import (
	"bytes"
	"fmt"
)

// prescan returns, and bounds, from the raw bytes and before the YAML library builds a
// single node, how many values each document and the whole source can
// hold, and how many documents there are. The YAML library builds a
// document's whole node tree (about 230 bytes a node) before anything can
// count it, so an 8 MiB flow list of four million "1,"s used to cost
// 900 MB: the count has to come first.
//
// The count is an upper bound, never an estimate: it reads no quoting,
// comment or block scalar structure (that is where a cheap scanner goes
// wrong and can be made to skip real nodes), and counts every byte that
// could begin or imply a node:
//
//   - a token start: a byte other than a blank or a flow indicator that
//     follows a blank, a line break, the start of the input, or one of
//     , [ { : (every non-empty scalar, alias, anchor and tag starts so);
//   - [ and { (flow collections);
//   - twice each : followed by a blank, a break, a flow indicator or the
//     end, or preceded by a quote ("a":1), each - and ? followed by the
//     same (block collections, empty keys and values);
//   - each , and } (an empty value in a flow mapping);
//   - two per document (its root collection and one empty node).
//
// Text inside scalars is counted as if it were structure, which only
// overcounts: ordinary manifests bound to 1.5 to 3 times their real
// number of values.
//
// Unicode line breaks (NEL, LS, PS) count as breaks. Input that is not
// UTF-8 (a UTF-16 or UTF-32 byte order mark, or any NUL byte) is refused:
// the YAML library would decode it, and these byte counts would not hold.
func prescan(src Source, lim Limits) (int, error) {
	data := src.Data
	if bytes.HasPrefix(data, []byte{0xFE, 0xFF}) || bytes.HasPrefix(data, []byte{0xFF, 0xFE}) ||
		bytes.IndexByte(data, 0) >= 0 {
		return 0, &Error{Source: src.Name, Msg: "not UTF-8 text (only UTF-8 YAML or JSON is read)"}
	}
	docs, docStart, docLine, line := 1, 0, 1, 1
	var inFile, inDoc int
	for i := 0; i < len(data); i++ {
		c := data[i]
		var prev byte = '\n'
		if i > 0 {
			prev = data[i-1]
		}
		if c == '\n' {
			line++
		}
		// A document marker: --- or ... at the start of a line, followed
		// by a blank, a break or the end.
		if (c == '-' || c == '.') && prev == '\n' && i+2 < len(data) && data[i+1] == c && data[i+2] == c &&
			(i+3 == len(data) || isBlankOrBreak(data[i+3])) {
			if i > docStart {
				docs++
				if docs > lim.MaxDocuments {
					return 0, &Error{Source: src.Name, Index: docs, Line: line, Msg: fmt.Sprintf("more than %d documents", lim.MaxDocuments)}
				}
			}
			inDoc, docStart, docLine = 0, i+3, line
			i += 2
			continue
		}
		n := 0
		switch {
		case c == '[' || c == '{':
			n = 1
		case c == ',' || c == '}':
			n = 1
		case c == ':':
			if i+1 == len(data) || isBlankOrBreak(data[i+1]) || isFlowIndicator(data[i+1]) || prev == '"' || prev == '\'' {
				n = 2
			}
		case c == '-' || c == '?':
			if i+1 == len(data) || isBlankOrBreak(data[i+1]) || isFlowIndicator(data[i+1]) {
				n = 2
			}
		}
		if !isBlankOrBreak(c) && !isFlowIndicator(c) && (isBlankOrBreak(prev) || prev == ',' || prev == '[' || prev == '{' || prev == ':') {
			n++ // a token start
		}
		if n == 0 {
			continue
		}
		if inDoc == 0 {
			n += 2 // the document's root collection and an empty node
		}
		inDoc += n
		inFile += n
		if inDoc > lim.MaxDocumentValues {
			return 0, &Error{Source: src.Name, Index: docs, Line: docLine, Msg: fmt.Sprintf("more than %d values in one document; split it into several documents", lim.MaxDocumentValues)}
		}
		if inFile > lim.MaxValues {
			return 0, &Error{Source: src.Name, Index: docs, Line: line, Msg: fmt.Sprintf("more than %d values in one file; split it into several files", lim.MaxValues)}
		}
	}
	return inFile, nil
}

// isBlankOrBreak: a space, a tab, a line break, or a byte that can end a
// Unicode line break (NEL U+0085 is C2 85, LS and PS are E2 80 A8/A9) or
// begin one (C2, E2). Taking a byte of other non-ASCII text for a break
// only overcounts.
func isBlankOrBreak(b byte) bool {
	switch b {
	case ' ', '\t', '\n', '\r', 0x85, 0xA8, 0xA9, 0xC2, 0xE2:
		return true
	}
	return false
}

func isFlowIndicator(b byte) bool {
	switch b {
	case ',', '[', ']', '{', '}':
		return true
	}
	return false
}

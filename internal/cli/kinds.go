package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/storageloc"
	"github.com/lethehq/lethe/internal/termtext"
)

// builtinKind is one of Lethe's own kinds, with the names a user may type
// for it (as kubectl's singular, plural and short names).
type builtinKind struct {
	kind  string
	names []string
}

var builtinKinds = []builtinKind{
	{backup.Kind, []string{"backup", "backups", "bk"}},
	{manifest.KindBundle, []string{"bundle", "bundles"}},
	{storageloc.Kind, []string{"backupstoragelocation", "backupstoragelocations", "bsl"}}, // bsl: Velero's short name
}

// kindName turns what a user types for one of Lethe's own kinds
// ("backups", "bk", "Backup") into the kind; any other word is returned as
// typed (resolveKind resolves it against the catalog).
func kindName(s string) string {
	l := strings.ToLower(s)
	for _, b := range builtinKinds {
		if slices.Contains(b.names, l) {
			return b.kind
		}
	}
	return s
}

// kindForms are the names a kind answers to, in lower case: itself, and
// its plural.
func kindForms(kind string) []string {
	l := strings.ToLower(kind)
	forms := []string{l, l + "s"}
	switch {
	case strings.HasSuffix(l, "s"), strings.HasSuffix(l, "x"), strings.HasSuffix(l, "z"),
		strings.HasSuffix(l, "ch"), strings.HasSuffix(l, "sh"):
		forms = append(forms, l+"es")
	case strings.HasSuffix(l, "y") && len(l) > 1 && !strings.ContainsRune("aeiou", rune(l[len(l)-2])):
		forms = append(forms, l[:len(l)-1]+"ies")
	}
	return forms
}

// unknownKindError is a kind the catalog has never held (exit 4).
type unknownKindError struct {
	typed   string
	suggest string
}

func (e *unknownKindError) Error() string {
	s := fmt.Sprintf("the catalog has never held a resource of kind %s", termtext.Quote(e.typed))
	if e.suggest != "" {
		s += fmt.Sprintf("; did you mean %s?", termtext.Quote(e.suggest))
	}
	return s
}

// resolveKind resolves what a user typed for a kind as kubectl resolves
// a resource type: Lethe's own kinds by their names (backup, backups,
// bk, bundle, ...), and every kind the catalog has ever held by its name
// in any case, singular or plural. A word that matches nothing is an
// *unknownKindError (exit 4) with the nearest known name.
func resolveKind(ctx context.Context, st catalog.Store, typed string) (string, error) {
	if k := kindName(typed); k != typed || slices.ContainsFunc(builtinKinds, func(b builtinKind) bool { return b.kind == typed }) {
		return k, nil
	}
	kinds, err := st.Kinds(ctx)
	if err != nil {
		return "", err
	}
	if slices.Contains(kinds, typed) {
		return typed, nil
	}
	l := strings.ToLower(typed)
	var found []string
	for _, k := range kinds {
		if slices.Contains(kindForms(k), l) {
			found = append(found, k)
		}
	}
	if len(found) == 1 {
		return found[0], nil
	}
	if len(found) > 1 {
		return "", usageError{fmt.Errorf("kind %s is ambiguous: it names %s; type one exactly", termtext.Quote(typed), strings.Join(quoteAll(found), ", "))}
	}
	// The nearest name: of Lethe's own kinds and of the catalog's.
	var names []string
	for _, b := range builtinKinds {
		names = append(names, b.names[:2]...)
	}
	for _, k := range kinds {
		names = append(names, k, kindForms(k)[1])
	}
	best, bestD := "", 3 // at most two edits away
	for _, n := range names {
		if d := editDistance(l, strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		var kindsKnown []string
		for _, b := range builtinKinds {
			kindsKnown = append(kindsKnown, b.kind)
		}
		best = abbreviated(l, append(kindsKnown, kinds...))
	}
	return "", exitCodeError{code: exitNotFound, err: &unknownKindError{typed: typed, suggest: best}}
}

// abbreviated is the known kind that typed (lower case, two letters or
// more) abbreviates: a prefix of it (dat for Database) or, failing that,
// its letters in order from the first (db for Database); the shortest
// such kind, or "".
func abbreviated(typed string, kinds []string) string {
	if len(typed) < 2 {
		return ""
	}
	best, bestPrefix := "", false
	for _, k := range kinds {
		l := strings.ToLower(k)
		prefix := strings.HasPrefix(l, typed)
		if !prefix && !(l[0] == typed[0] && isSubsequence(typed, l)) {
			continue
		}
		if best == "" || (prefix && !bestPrefix) || (prefix == bestPrefix && len(k) < len(best)) {
			best, bestPrefix = k, prefix
		}
	}
	return best
}

// isSubsequence says whether s's letters all appear in t, in order.
func isSubsequence(s, t string) bool {
	for i := 0; i < len(t) && len(s) > 0; i++ {
		if t[i] == s[0] {
			s = s[1:]
		}
	}
	return s == ""
}

// editDistance is the Damerau-Levenshtein distance (optimal string
// alignment) of a and b, counted in bytes; kinds are ASCII.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// kindOf is resolveKind on the app's catalog.
func (a *app) kindOf(ctx context.Context, typed string) (string, error) {
	st, err := a.catalog(ctx)
	if err != nil {
		return "", err
	}
	return resolveKind(ctx, st, typed)
}

// validateKey refuses (exit 2, for every kind as for backups) a name or
// namespace that no resource can have, saying which rule it breaks.
func validateKey(k catalog.Key) error {
	if k.Kind == backup.Kind {
		if err := backup.ValidateName(k.Name); err != nil {
			return usageError{err}
		}
	} else if err := nameRule(k.Name, 253, "name", validation.IsDNS1123Subdomain(k.Name),
		"lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"); err != nil {
		return err
	}
	if k.Namespace != "" {
		return nameRule(k.Namespace, 63, "namespace", validation.IsDNS1123Label(k.Namespace),
			"lowercase letters, digits and '-', starting and ending with a letter or digit")
	}
	return nil
}

func nameRule(s string, maxLen int, what string, errs []string, chars string) error {
	switch {
	case len(errs) == 0:
		return nil
	case len(s) > maxLen:
		return usageError{fmt.Errorf("invalid %s (%d characters): a %s has at most %d", what, len(s), what, maxLen)}
	}
	return usageError{fmt.Errorf("invalid %s %s: use %s", what, termtext.Quote(s), chars)}
}

// checkSelector refuses (exit 2) a -l/--selector that does not parse.
func checkSelector(sel string) error {
	if sel == "" {
		return nil
	}
	if _, err := labels.Parse(sel); err != nil {
		return usageError{fmt.Errorf("--selector %s: %v", termtext.Quote(sel), err)}
	}
	return nil
}

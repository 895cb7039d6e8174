// Command sweepreport writes docs/mutation-sweep.md from the results of
// the mutation sweep (mutants/sweep.sh): one gremlins JSON result per
// package in mutants/sweep, its run's settings beside it (.env), and the
// reviewed notes on mutants that live (mutants/sweep/notes.tsv), and
// what is left to sweep (mutants/sweep/status.md, copied in as it is).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// packages are the packages the sweep covers, in the report's order.
var packages = []string{
	"internal/gc", "internal/retry", "internal/softdelete", "internal/apply", "internal/leader",
	"internal/deletion", "internal/velero", "internal/manifest", "internal/catalog/internal/sqlstore",
}

// result is the part of gremlins' JSON output the report uses.
type result struct {
	Files []struct {
		Name      string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
}

type mutant struct {
	file, typ, status, src string
	line, col              int
}

func main() {
	root := flag.String("root", "../..", "the repository's root")
	out := flag.String("out", "", "the report to write (default: stdout)")
	flag.Parse()
	if err := run(*root, *out); err != nil {
		fmt.Fprintln(os.Stderr, "sweepreport:", err)
		os.Exit(1)
	}
}

func run(root, out string) error {
	dir := filepath.Join(root, "mutants", "sweep")
	notes, err := readNotes(filepath.Join(dir, "notes.tsv"))
	if err != nil {
		return err
	}
	used := map[string]bool{}
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("| Package | Killed | Lived | Not covered | Timed out | Not viable | Efficacy | Lived: killed since / equivalent | Efficacy now | Swept |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	var details strings.Builder
	var notSwept []string
	swept := map[string]bool{}
	for _, pkg := range packages {
		name := strings.ReplaceAll(pkg, "/", "-")
		// A package's result is name.json, or several parts
		// (name.PART.json), each a run over some of its files at its own
		// commit (SWEEP_PART in mutants/sweep.sh).
		parts, err := filepath.Glob(filepath.Join(dir, name+".*json"))
		if err != nil {
			return err
		}
		parts = slices.DeleteFunc(parts, func(p string) bool {
			base := strings.TrimSuffix(filepath.Base(p), ".json")
			return base != name && !strings.HasPrefix(base, name+".")
		})
		if len(parts) == 0 {
			notSwept = append(notSwept, pkg)
			fmt.Fprintf(&b, "| `%s` | | | | | | | | | not yet swept |\n", pkg)
			continue
		}
		swept[pkg] = true
		count := map[string]int{}
		var shown []mutant
		var runs []string
		for _, part := range parts {
			data, err := os.ReadFile(part)
			if err != nil {
				return err
			}
			var res result
			if err := json.Unmarshal(data, &res); err != nil {
				return fmt.Errorf("%s: %w", filepath.Base(part), err)
			}
			env := readEnv(strings.TrimSuffix(part, ".json") + ".env")
			var files []string
			for _, f := range res.Files {
				files = append(files, "`"+f.Name+"`")
				file := filepath.ToSlash(filepath.Join(pkg, f.Name))
				lines := sourceLines(root, env["commit"], file)
				for _, m := range f.Mutations {
					count[m.Status]++
					if m.Status != "LIVED" && m.Status != "TIMED OUT" {
						continue
					}
					src := ""
					if m.Line >= 1 && m.Line <= len(lines) {
						src = strings.TrimSpace(lines[m.Line-1])
					}
					shown = append(shown, mutant{file: file, typ: m.Type, status: m.Status, src: src, line: m.Line, col: m.Column})
				}
			}
			run := strings.TrimSpace(fmt.Sprintf("%s at %s, %ss, timeout ×%s, PostgreSQL %s",
				env["date"], env["commit"], env["seconds"], env["coefficient"], env["postgres"]))
			if ex := strings.TrimSpace(env["excluded"]); ex != "" {
				run += "; **files not swept:** `" + strings.Join(strings.Fields(ex), "`, `") + "`"
			}
			if tests := strings.TrimSpace(env["run"]); tests != "" {
				run += "; only the tests `-run " + strings.ReplaceAll(tests, "|", `\|`) + "`"
			}
			if sk := strings.TrimSpace(env["skipped"]); sk != "" {
				run += "; **tests not run:** `-skip " + strings.ReplaceAll(sk, "|", `\|`) + "`"
			}
			if note := strings.TrimSpace(env["note"]); note != "" {
				run += "; " + note
			}
			if len(parts) > 1 {
				slices.Sort(files)
				run = strings.Join(slices.Compact(files), ", ") + ": " + run
			}
			runs = append(runs, run)
		}
		killed, lived := count["KILLED"], count["LIVED"]
		eff := "–"
		if killed+lived > 0 {
			eff = fmt.Sprintf("%.1f%%", 100*float64(killed)/float64(killed+lived))
		}
		swept := strings.Join(runs, "<br>")
		since, equiv := 0, 0
		for _, m := range shown {
			_, note := lookupNote(notes, m)
			switch {
			case m.status != "LIVED":
			case strings.HasPrefix(note, "Killed since"):
				since++
			case strings.HasPrefix(note, "Equivalent"):
				equiv++
			}
		}
		now := "–"
		if d := killed + lived - equiv; d > 0 {
			now = fmt.Sprintf("%.1f%%", 100*float64(killed+since)/float64(d))
		}
		fmt.Fprintf(&b, "| `%s` | %d | %d | %d | %d | %d | %s | %d / %d | %s | %s |\n", pkg, killed, lived,
			count["NOT COVERED"], count["TIMED OUT"], count["NOT VIABLE"], eff, since, equiv, now, swept)

		fmt.Fprintf(&details, "\n## `%s`\n\n", pkg)
		if len(shown) == 0 {
			details.WriteString("No mutant lived or timed out.\n")
			continue
		}
		slices.SortFunc(shown, func(a, b mutant) int {
			return strings.Compare(fmt.Sprintf("%s:%06d:%04d", a.file, a.line, a.col), fmt.Sprintf("%s:%06d:%04d", b.file, b.line, b.col))
		})
		details.WriteString("| Where | Mutator | Status | Line | Why it lives |\n|---|---|---|---|---|\n")
		for _, m := range shown {
			k, note := lookupNote(notes, m)
			_, ok := notes[k]
			switch {
			case ok:
				used[k] = true
			case m.status == "TIMED OUT":
				note = "timed out: counted neither killed nor lived (see above)"
			default:
				note = "**not reviewed yet**"
			}
			fmt.Fprintf(&details, "| %s:%d:%d | %s | %s | `%s` | %s |\n", m.file, m.line, m.col, m.typ, m.status,
				strings.ReplaceAll(m.src, "|", `\|`), note)
		}
	}
	b.WriteString("\n")
	if len(notSwept) > 0 {
		fmt.Fprintf(&b, "**Not yet swept:** %s. Run `make mutation-sweep SWEEP_PKGS=\"%s\"` to add them.\n",
			strings.Join(quoteAll(notSwept), ", "), strings.Join(notSwept, " "))
	}
	if status, err := os.ReadFile(filepath.Join(dir, "status.md")); err == nil {
		b.WriteString("\n")
		b.Write(status)
	}
	b.WriteString(details.String())
	var stale []string
	for k := range notes {
		file, _, _ := strings.Cut(k, "\t")
		if !used[k] && swept[filepath.ToSlash(filepath.Dir(file))] {
			stale = append(stale, k)
		}
	}
	if len(stale) > 0 {
		slices.Sort(stale)
		b.WriteString("\n## Notes that match no living mutant any more\n\n")
		for _, k := range stale {
			fmt.Fprintf(&b, "- `%s`\n", strings.ReplaceAll(k, "\t", " · "))
		}
	}
	if out == "" {
		_, err = os.Stdout.WriteString(b.String())
		return err
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

const header = `# Mutation sweep

` + "`make mutation-sweep`" + ` runs [gremlins](https://github.com/go-gremlins/gremlins)
(pinned in ` + "`tools/gremlins/go.mod`" + `) over the engines, one package at a
time with one worker, and writes this file. Each mutant changes one token
(` + "`<` to `<=`, `==` to `!=`, `&&` to `||`, `+` to `-`, ++ to --" + `, a sign)
and runs the package's own tests on it (for
` + "`internal/catalog/internal/sqlstore`" + `, the catalog's SQL side, the tests
that judge it are the drivers': the conformance suite that
` + "`internal/catalog/sqlite` and `internal/catalog/postgres`" + ` run; see
` + "`SWEEP_TESTS`" + ` in ` + "`mutants/sweep.sh`" + `):

- **killed**: a test failed; **lived**: every test passed;
- **not covered**: no test of the package runs that line, so it is not tried;
- **timed out**: the tests ran past the timeout (the package's coverage run
  times the coefficient); usually a loop that no longer ends, counted
  neither way;
- **not viable**: the mutant does not build (gremlins counts a failed build as killed; tools/gremlins/viable rebuilds each killed arithmetic mutant after the run and moves those that do not build here).

Efficacy is killed / (killed + lived), as gremlins counts it in the run.
"Efficacy now" counts the mutants that lived in the run but are killed by a
test written since as killed, and sets aside those shown equivalent (no
test can tell them from the original): (killed + killed since) / (killed +
lived − equivalent). Every mutant that lives is listed
below with why: the test that should kill it, or one sentence on why it
is equivalent (no test can tell it from the original) or decides no rule.
The hand-written mutants in ` + "`mutants/`" + ` (` + "`make mutants`" + `, in CI) cover
the rules a one-token change cannot express.

<!-- doctest: skip hours on 2 cores, and it writes mutants/sweep/: run in the docs' scratch folder, it found no test and replaced every package's result -->
` + "```sh" + `
make mutation-sweep                                   # every package below (hours on 2 cores)
make mutation-sweep SWEEP_PKGS="internal/softdelete"  # one package; the others keep their last result
` + "```" + `

gremlins tests a copy of the tree taken as it starts, after measuring the
package's tests in place: leave the tree alone while it runs (or run it in
a clone and copy ` + "`mutants/sweep/`" + ` back).

`

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = "`" + v + "`"
	}
	return out
}

func noteKey(file, typ, src string) string { return file + "\t" + typ + "\t" + src }

// lookupNote finds m's note: one written for its column (mutator
// TYPE@column, for two mutants of one type on one line that differ)
// first, else the one for its type on that line. It returns the note's
// key and text.
func lookupNote(notes map[string]string, m mutant) (key, note string) {
	key = noteKey(m.file, fmt.Sprintf("%s@%d", m.typ, m.col), m.src)
	if n, ok := notes[key]; ok {
		return key, n
	}
	key = noteKey(m.file, m.typ, m.src)
	return key, notes[key]
}

// readNotes reads notes.tsv: file, mutator, the trimmed source line and
// the note, tab-separated; # starts a comment line.
func readNotes(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	notes := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, "\t")
		if len(parts) != 4 {
			return nil, fmt.Errorf("%s:%d: want 4 tab-separated fields (file, mutator, source line, note), got %d", path, n, len(parts))
		}
		notes[noteKey(parts[0], parts[1], strings.TrimSpace(parts[2]))] = parts[3]
	}
	return notes, sc.Err()
}

func readEnv(path string) map[string]string {
	env := map[string]string{}
	data, err := os.ReadFile(path)
	if err != nil {
		return env
	}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	return env
}

// sourceLines returns file's lines as they were at commit, the commit the
// run was made at (a run's line numbers are that commit's, and the tree
// has moved on since); from the working tree when the run had changes of
// its own ("+changes") or git cannot show that commit.
func sourceLines(root, commit, file string) []string {
	if commit != "" && !strings.Contains(commit, "+") {
		//nolint:gosec // git with a commit and path from the sweep's own files
		out, err := exec.Command("git", "-C", root, "show", commit+":"+file).Output()
		if err == nil {
			return strings.Split(string(out), "\n")
		}
	}
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil
	}
	return strings.Split(string(data), "\n")
}

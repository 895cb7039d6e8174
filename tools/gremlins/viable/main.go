// Command viable corrects a gremlins result (mutants/sweep/*.json) for the
// mutants that do not build. gremlins counts a mutant as KILLED whenever
// `go test` fails, and `go test` fails on a build error too: a string
// concatenation `a + b` turned into `a - b` is "killed" by the compiler,
// not by a test. For each KILLED arithmetic mutant, viable plants the
// mutation in a checkout of the commit the result was swept at (its .env
// file's commit=, with the checkout's uncommitted changes when it says
// +changes), builds the package with its tests (go test -run '^$'),
// and marks the mutant NOT VIABLE when that does not build. It rewrites
// the JSON in place, counts included, and records viable=checked in the
// .env file.
//
// Usage: go run ./viable -root REPO mutants/sweep/NAME.json...
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// replacement is gremlins' ARITHMETIC_BASE mutator: the token at the
// mutant's column and what it becomes.
var replacement = map[string]string{"+": "-", "-": "+", "*": "/", "/": "*", "%": "*"}

func main() {
	root := flag.String("root", ".", "the repository")
	flag.Parse()
	for _, f := range flag.Args() {
		if err := check(*root, f); err != nil {
			fmt.Fprintln(os.Stderr, "viable:", err)
			os.Exit(1)
		}
	}
}

func check(root, jsonPath string) error {
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", jsonPath, err)
	}
	envPath := strings.TrimSuffix(jsonPath, ".json") + ".env"
	env, err := os.ReadFile(envPath)
	if err != nil {
		return err
	}
	if strings.Contains(string(env), "\nviable=checked") {
		fmt.Printf("%s: checked already\n", jsonPath)
		return nil
	}
	commit, dirty := "", false
	for _, l := range strings.Split(string(env), "\n") {
		if v, ok := strings.CutPrefix(l, "commit="); ok {
			commit, dirty = strings.TrimSuffix(v, "+changes"), strings.HasSuffix(v, "+changes")
		}
	}
	if commit == "" {
		return fmt.Errorf("%s: no commit=", envPath)
	}
	// internal-gc.rules.json → internal/gc
	base := strings.SplitN(filepath.Base(strings.TrimSuffix(jsonPath, ".json")), ".", 2)[0]
	pkg := strings.ReplaceAll(base, "-", "/")

	tmp, err := os.MkdirTemp("", "lethe-viable-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "tree")
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", tree, commit).CombinedOutput(); err != nil {
		return fmt.Errorf("worktree at %s: %v: %s", commit, err, out)
	}
	defer exec.Command("git", "-C", root, "worktree", "remove", "--force", tree).Run()
	if dirty {
		// Swept with uncommitted changes (sweep.sh runs viable at once,
		// on the same tree): carry them over.
		diff, err := exec.Command("git", "-C", root, "diff", commit).Output()
		if err != nil {
			return err
		}
		apply := exec.Command("git", "-C", tree, "apply")
		apply.Stdin = bytes.NewReader(diff)
		if out, err := apply.CombinedOutput(); err != nil {
			return fmt.Errorf("carrying the uncommitted changes over: %v: %s", err, out)
		}
	}

	files, _ := doc["files"].([]any)
	changed := 0
	for _, f := range files {
		fm, _ := f.(map[string]any)
		name, _ := fm["file_name"].(string)
		muts, _ := fm["mutations"].([]any)
		for _, m := range muts {
			mm, _ := m.(map[string]any)
			if mm["type"] != "ARITHMETIC_BASE" || mm["status"] != "KILLED" {
				continue
			}
			line, col := int(mm["line"].(float64)), int(mm["column"].(float64))
			ok, err := builds(tree, pkg, name, line, col)
			if err != nil {
				return fmt.Errorf("%s %s:%d:%d: %w", jsonPath, name, line, col, err)
			}
			if !ok {
				mm["status"] = "NOT VIABLE"
				changed++
			}
		}
	}
	if changed > 0 {
		killed, _ := doc["mutants_killed"].(float64)
		lived, _ := doc["mutants_lived"].(float64)
		nv, _ := doc["mutants_not_viable"].(float64)
		doc["mutants_killed"], doc["mutants_not_viable"] = killed-float64(changed), nv+float64(changed)
		if k := killed - float64(changed); k+lived > 0 {
			doc["test_efficacy"] = 100 * k / (k + lived)
		}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(jsonPath, append(out, '\n'), 0o644); err != nil {
		return err
	}
	note := fmt.Sprintf("viable=checked\nnot_viable_found=%d\n", changed)
	if err := os.WriteFile(envPath, append(bytes.TrimRight(env, "\n"), append([]byte("\n"), note...)...), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %d killed mutants did not build: now NOT VIABLE\n", jsonPath, changed)
	return nil
}

// builds plants the arithmetic mutation at line:col of pkg/name in tree
// and reports whether the package and its tests still build.
func builds(tree, pkg, name string, line, col int) (bool, error) {
	path := filepath.Join(tree, pkg, name)
	src, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	lines := bytes.SplitAfter(src, []byte("\n"))
	if line < 1 || line > len(lines) || col < 1 || col > len(lines[line-1]) {
		return false, errors.New("no such position")
	}
	l := lines[line-1]
	tok := string(l[col-1])
	to, ok := replacement[tok]
	if !ok {
		return false, fmt.Errorf("no arithmetic operator at the position (%q)", tok)
	}
	mutated := bytes.Clone(src)
	off := 0
	for _, x := range lines[:line-1] {
		off += len(x)
	}
	mutated[off+col-1] = to[0]
	if err := os.WriteFile(path, mutated, 0o644); err != nil {
		return false, err
	}
	defer os.WriteFile(path, src, 0o644)
	cmd := exec.Command("go", "test", "-count=1", "-run", "^$", "./"+pkg)
	cmd.Dir = tree
	out, err := cmd.CombinedOutput()
	if err == nil {
		return true, nil
	}
	// A build failure, not a test failure: the package did not compile.
	if bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")) {
		return false, nil
	}
	return false, fmt.Errorf("go test -run '^$' failed without a build error: %s", out)
}

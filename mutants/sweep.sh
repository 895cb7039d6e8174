#!/usr/bin/env bash
# The mutation sweep (make mutation-sweep): runs go-gremlins/gremlins (pinned
# in tools/gremlins/go.mod) over each package, one package at a time, with one
# worker, and keeps each package's result as mutants/sweep/<package>.json.
# Then it writes docs/mutation-sweep.md from every result kept there (a
# package not swept yet is listed as such) and the reviewed notes in
# mutants/sweep/notes.tsv.
#
# Usage: mutants/sweep.sh [internal/pkg ...]   (default: every swept package)
# SWEEP_TIMEOUT_COEFFICIENT (default 8): a mutant's test run may take this
# many times the package's unmutated coverage run before it counts as timed
# out. SWEEP_EXCLUDE: space-separated regexps of files (relative to the
# package) not to mutate, recorded in the report (e.g. a file another branch
# is rewriting). SWEEP_PART: keep this run as mutants/sweep/<package>.<part>.json
# beside the package's other parts (runs over other files, at their own
# commits); the report sums a package's parts. SWEEP_FILES: space-separated
# file names of the package to mutate, the others excluded as SWEEP_EXCLUDE
# does (and listed in the report the same way). SWEEP_RUN: a go test -run
# regexp, so only those tests run on the coverage step and on each mutant
# (recorded in the report). SWEEP_SKIP: a go test -skip regexp of tests not
# run (e.g. slow tests of files not swept), recorded the same way.
# SWEEP_TESTS: space-separated packages whose
# tests judge the package instead of its own (for
# internal/catalog/internal/sqlstore, the drivers that run the conformance
# suite, the default for that package): gremlins then runs in --integration
# mode with --coverpkg set to the package, and a `go` wrapper first on PATH
# narrows its `go test ./...` (the coverage run and each mutant's run) to
# those packages (recorded). Exported LETHE_TEST_POSTGRES_URL reaches the
# tests, as in make test; unset it to sweep on SQLite only (recorded).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
  pkgs=(internal/gc internal/retry internal/softdelete internal/apply internal/leader
        internal/deletion internal/velero internal/manifest internal/catalog/internal/sqlstore)
fi
mkdir -p mutants/sweep
coef=${SWEEP_TIMEOUT_COEFFICIENT:-8}
exclude=()
for e in ${SWEEP_EXCLUDE:-}; do exclude+=(--exclude-files "$e"); done
# Each mutant's test binary is linked afresh: without DWARF it links sooner.
# -count=1: gremlins times its coverage run to set each mutant's timeout, and
# a cached test result would make that time (and every timeout) far too short.
# gremlins runs go test with the environment it was given, so a -run (or -skip) in
# GOFLAGS reaches the coverage run and every mutant's run alike.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-ldflags=-w -count=1${SWEEP_RUN:+ -run=$SWEEP_RUN}${SWEEP_SKIP:+ -skip=$SWEEP_SKIP}"
realgo=$(command -v go)
shim=$(mktemp -d "${TMPDIR:-/tmp}/lethe-sweep-go-XXXXXX")
trap 'rm -rf "$shim"' EXIT
# gremlins is built and run as its own binary, not through `go tool`: the go
# command puts GOROOT/bin first on its children's PATH, which would hide the
# wrapper below.
(cd tools/gremlins && go build -o "$shim/bin/gremlins" github.com/go-gremlins/gremlins/cmd/gremlins)
gremlins=("$shim/bin/gremlins")

for p in "${pkgs[@]}"; do
  p=${p#./}
  p=${p%/}
  if [ ! -d "$p" ]; then
    echo "mutation-sweep: no package directory $p" >&2
    exit 2
  fi
  name=$(tr / - <<<"$p")
  out="$root/mutants/sweep/$name${SWEEP_PART:+.$SWEEP_PART}.json"
  excluded=${SWEEP_EXCLUDE:-}
  pexclude=("${exclude[@]}")
  if [ -n "${SWEEP_FILES:-}" ]; then
    for f in "$p"/*.go; do
      f=${f##*/}
      case $f in *_test.go) continue ;; esac
      case " $SWEEP_FILES " in *" $f "*) continue ;; esac
      re="^${f//./\\.}\$"
      pexclude+=(--exclude-files "$re")
      excluded="${excluded:+$excluded }$re"
    done
  fi
  echo "== $p"
  start=$(date +%s)
  # Mutators: gremlins' defaults (arithmetic, conditional boundaries and
  # negations, ++/--, negatives) plus && <-> ||, the shape of most rules.
  # The catalog's SQL-side rules live in sqlstore, which the drivers'
  # conformance suite (internal/catalog/catalogtest) tests.
  tests=${SWEEP_TESTS:-}
  if [ -z "$tests" ] && [ "$p" = internal/catalog/internal/sqlstore ]; then
    tests="internal/catalog/sqlite internal/catalog/postgres"
  fi
  integration=()
  path=$PATH
  if [ -n "$tests" ]; then
    integration=(--integration --coverpkg "./$p")
    # gremlins' integration mode runs `go test ... ./...` from the module
    # root (for coverage and for each mutant); this wrapper, first on PATH,
    # runs the judging packages instead.
    judges=$(for t in $tests; do printf ' ./%s' "${t#./}"; done)
    mkdir -p "$shim/go-wrapper"
    printf '#!/usr/bin/env bash\nif [ "${1:-}" = test ] && [ "${@: -1}" = ./... ]; then\n  set -- "${@:1:$#-1}"%s\nfi\nexec %q "$@"\n' \
      "$judges" "$realgo" >"$shim/go-wrapper/go"
    chmod +x "$shim/go-wrapper/go"
    path="$shim/go-wrapper:$PATH"
  fi
  (cd "$p" && PATH=$path "${gremlins[@]}" unleash --workers 1 --timeout-coefficient "$coef" \
    --invert-logical ${integration[@]+"${integration[@]}"} ${pexclude[@]+"${pexclude[@]}"} --output "$out.tmp")
  # A coverage step that found no test (go test matched no package, as in
  # a tree of symbolic links) leaves every mutant NOT COVERED: that is no
  # sweep, and it must not replace the package's result.
  if ! grep -qE '"status":"(KILLED|LIVED|TIMED OUT|NOT VIABLE)"' "$out.tmp"; then
    rm -f "$out.tmp"
    echo "mutation-sweep: $p: no mutant was tested (the coverage step found no test); its result is kept as it was" >&2
    exit 1
  fi
  mv "$out.tmp" "$out"
  printf 'date=%s\ncommit=%s\nseconds=%s\ncoefficient=%s\npostgres=%s\nexcluded=%s\nrun=%s\nskipped=%s\ntests=%s\n' \
    "$(date -u +%Y-%m-%dT%H:%MZ)" "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- "$p" || echo '+changes')" \
    "$(( $(date +%s) - start ))" "$coef" "$([ -n "${LETHE_TEST_POSTGRES_URL:-}" ] && echo yes || echo no)" "$excluded" "${SWEEP_RUN:-}" "${SWEEP_SKIP:-}" "$tests" >"${out%.json}.env"
  # gremlins counts a mutant that does not build (a string's + turned into
  # -) as killed: viable rebuilds each killed arithmetic mutant and marks
  # those that do not build NOT VIABLE.
  (cd tools/gremlins && go run ./viable -root "$root" "$out")
done

(cd tools/gremlins && go run ./sweepreport -root "$root" -out "$root/docs/mutation-sweep.md")
echo "wrote docs/mutation-sweep.md"

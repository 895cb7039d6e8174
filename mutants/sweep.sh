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
# commits); the report sums a package's parts. SWEEP_SKIP: a go test -skip
# regexp of tests not run (for the coverage run and every mutant), recorded in
# the report (e.g. slow tests of files not swept). Exported
# LETHE_TEST_POSTGRES_URL reaches the tests, as in make test.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
  pkgs=(internal/gc internal/retry internal/softdelete internal/apply internal/leader
        internal/deletion internal/velero internal/manifest internal/catalog)
fi
mkdir -p mutants/sweep
coef=${SWEEP_TIMEOUT_COEFFICIENT:-8}
gremlins=(go tool -modfile="$root/tools/gremlins/go.mod" gremlins)
exclude=()
for e in ${SWEEP_EXCLUDE:-}; do exclude+=(--exclude-files "$e"); done
# Each mutant's test binary is linked afresh: without DWARF it links sooner.
# -count=1: gremlins times the coverage run to set each mutant's timeout, and
# a coverage run the test cache answers takes seconds (every mutant times out).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-ldflags=-w -count=1"
# gremlins runs go test with no test filter of its own; GOFLAGS carries it.
if [ -n "${SWEEP_SKIP:-}" ]; then export GOFLAGS="$GOFLAGS -skip=$SWEEP_SKIP"; fi

for p in "${pkgs[@]}"; do
  p=${p#./}
  p=${p%/}
  if [ ! -d "$p" ]; then
    echo "mutation-sweep: no package directory $p" >&2
    exit 2
  fi
  name=$(tr / - <<<"$p")
  out="$root/mutants/sweep/$name${SWEEP_PART:+.$SWEEP_PART}.json"
  echo "== $p"
  start=$(date +%s)
  # Mutators: gremlins' defaults (arithmetic, conditional boundaries and
  # negations, ++/--, negatives) plus && <-> ||, the shape of most rules.
  (cd "$p" && "${gremlins[@]}" unleash --workers 1 --timeout-coefficient "$coef" \
    --invert-logical "${exclude[@]}" --output "$out.tmp")
  mv "$out.tmp" "$out"
  printf 'date=%s\ncommit=%s\nseconds=%s\ncoefficient=%s\npostgres=%s\nexcluded=%s\nskipped=%s\n' \
    "$(date -u +%Y-%m-%dT%H:%MZ)" "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- "$p" || echo '+changes')" \
    "$(( $(date +%s) - start ))" "$coef" "$([ -n "${LETHE_TEST_POSTGRES_URL:-}" ] && echo yes || echo no)" "${SWEEP_EXCLUDE:-}" "${SWEEP_SKIP:-}" >"${out%.json}.env"
done

(cd tools/gremlins && go run ./sweepreport -root "$root" -out "$root/docs/mutation-sweep.md")
echo "wrote docs/mutation-sweep.md"

#!/usr/bin/env bash
# Checks that every invariant's test catches its mutation: for each
# mutants/NN-name.patch, apply it to a scratch copy of the tree, run the one
# test its header names, and fail unless that test fails. A patch that no
# longer applies, or a mutant that does not build, fails the run too: the
# check cannot rot silently. Usage: mutants/run.sh [patch...]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

patches=("$@")
if [ ${#patches[@]} -eq 0 ]; then
  patches=(mutants/*.patch)
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/lethe-mutants-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
# One copy for every mutant, each reverted after its run: the build cache
# then recompiles only what a patch touches.
git ls-files -z --cached --others --exclude-standard | grep -zv '^mutants/' | tar --null -T - -cf - | tar -xf - -C "$scratch"

header() { sed -n "s/^# $1: *//p" "$2" | head -1; }

failed=0
for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  pkg=$(header Package "$p")
  run=$(header Run "$p")
  what=$(header Mutant "$p")
  if [ -z "$pkg" ] || [ -z "$run" ]; then
    echo "FAIL $name: the header must name '# Package:' and '# Run:'"
    failed=1
    continue
  fi
  if ! (cd "$scratch" && git apply --check "$root/$p" 2>&1 && git apply "$root/$p"); then
    echo "FAIL $name: the patch no longer applies; update it to the current code"
    failed=1
    continue
  fi
  start=$(date +%s)
  set +e
  out=$(cd "$scratch" && go test -count=1 -timeout 180s -run "$run" "$pkg" 2>&1)
  code=$?
  set -e
  secs=$(( $(date +%s) - start ))
  (cd "$scratch" && git apply -R "$root/$p")
  if grep -qE '\[(build|setup) failed\]|^# ' <<<"$out"; then
    echo "FAIL $name: the mutant does not build"
    sed 's/^/    /' <<<"$out" | head -20
    failed=1
  elif [ $code -eq 0 ]; then
    echo "FAIL $name: $pkg -run '$run' passed with the mutation ($what)"
    failed=1
  elif ! grep -qE '^(--- FAIL|panic: )' <<<"$out"; then
    echo "FAIL $name: $pkg -run '$run' exited $code without a failing test"
    sed 's/^/    /' <<<"$out" | tail -20
    failed=1
  else
    echo "ok   $name: caught by $pkg -run '$run' (${secs}s)"
  fi
done
exit $failed

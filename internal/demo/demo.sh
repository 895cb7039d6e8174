#!/usr/bin/env bash
# `make demo`: Lethe's main job end to end, on the embedded defaults: a
# SQLite catalog and a storage folder under a fresh home, and the example
# plugins built from this repo. Run it from the repository root after
# `make build`.
set -euo pipefail
cd "$(dirname "$0")/../.."

demo="$PWD/.demo"
rm -rf "$demo"
mkdir -p "$demo"
export LETHE_HOME="$demo/home"          # catalog, storage and plugins live here
snapshots="$demo/snapshots"             # the "cloud" snapshot-files deletes from
# Plugins get a minimal environment; what one needs is configured for it:
# binary snapshot-files gets LETHE_SNAPSHOT_DIR (same as --plugin-env).
export LETHE_PLUGIN_ENV="snapshot-files:LETHE_SNAPSHOT_DIR=$snapshots"
unset LETHE_STORE LETHE_STORAGE LETHE_PLUGIN_DIR LETHE_SNAPSHOT_DIR LETHE_PLUGIN_LOCK LETHE_PLUGIN_USER

bold() { if [ -t 1 ]; then printf '\n\033[1m%s\033[0m\n' "$*"; else printf '\n%s\n' "$*"; fi; }
say() { bold "# $*"; }
run() { bold "\$ lethe $*"; ./bin/lethe "$@"; }

say "Install the example plugins: copy their binaries into the plugin folder"
mkdir -p "$LETHE_HOME/plugins"
cp bin/plugins/* "$LETHE_HOME/plugins/"
ls "$LETHE_HOME/plugins"

say "Make a sample backup tarball (Velero layout) and the snapshots it made"
go run ./internal/demo/mksample -out "$demo/nightly-0412.tar.gz" -snapshots "$snapshots"
ls "$snapshots"

run plugin list
run backup create nightly-0412 --from "$demo/nightly-0412.tar.gz" --ttl 720h
run backup list
run backup delete nightly-0412 --dry-run

say "Someone still uses one snapshot: a .lock file sits beside it"
touch "$snapshots/snap-0001.img.lock"
set +e
run backup delete nightly-0412 --yes
code=$?
set -e
[ "$code" -eq 3 ] || { echo "demo: expected exit code 3 (items blocked), got $code" >&2; exit 1; }
say "Exit code 3: the backup stays, with what is left to do"
run backup get nightly-0412

say "The lock goes away; deleting again retries only the blocked item"
rm "$snapshots/snap-0001.img.lock"
run backup delete nightly-0412 --yes
run backup list
say "The snapshot folder is empty now:"
ls -A "$snapshots"; echo "($(ls -A "$snapshots" | wc -l) files)"

say "A grace window: the deletion waits, and can be undone"
go run ./internal/demo/mksample -out "$demo/weekly-17.tar.gz" -snapshots "$snapshots" >/dev/null
run backup create weekly-17 --from "$demo/weekly-17.tar.gz" --deletion-delay 24h
run backup delete weekly-17 --yes
run backup list
run backup undelete weekly-17
run backup list

bold "Done. Everything above lives in $LETHE_HOME; try: LETHE_HOME=$LETHE_HOME ./bin/lethe --help"

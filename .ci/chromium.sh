#!/usr/bin/env bash
# Installs Debian's Chromium, which the browser tests (internal/e2e/browser)
# drive headless, unless the pinned version is already installed.
# Idempotent; safe to run on every CI job.
#
# The pin: Debian's security archive keeps only the newest Chromium build, so
# a pinned version disappears when Debian ships the next one. Then this
# installs the newest that apt offers and says so loudly: bump VERSION to it
# (apt-cache madison chromium) rather than let CI fail for a browser update.
#
# Usage: .ci/chromium.sh   (as root)
set -euo pipefail

readonly VERSION=156.0.8078.108-1~deb12u1

installed="$(dpkg-query -W -f '${Status} ${Version}' chromium 2>/dev/null || true)"
if [[ "${installed}" == "install ok installed ${VERSION}" ]]; then
	echo "chromium ${VERSION} already installed"
	exit 0
fi

echo "installing chromium ${VERSION} (found: ${installed:-none})"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if apt-cache madison chromium | awk -F'|' '{ gsub(/ /, "", $2); print $2 }' | grep -qxF "${VERSION}"; then
	apt-get install -y -qq --allow-downgrades "chromium=${VERSION}" "chromium-common=${VERSION}" >/dev/null
else
	echo "WARNING: chromium ${VERSION} is no longer offered by apt; installing $(apt-cache policy chromium | awk '/Candidate:/ { print $2 }') instead: bump VERSION in .ci/chromium.sh"
	apt-get install -y -qq chromium >/dev/null
fi
chromium --version

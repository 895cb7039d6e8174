#!/usr/bin/env bash
# Installs versitygw, the S3-compatible server the blobstore tests run
# against (internal/blobstore/s3test), unless the pinned version is already
# installed. Idempotent; safe to run on every CI job.
#
# Usage: .ci/versitygw.sh        (installs into $GOBIN, else $(go env GOPATH)/bin)
set -euo pipefail

readonly VERSION=v1.8.0
readonly MODULE=github.com/versity/versitygw

gobin="$(go env GOBIN)"
if [[ -z "${gobin}" ]]; then
	gobin="$(go env GOPATH | cut -d: -f1)/bin"
fi
bin="${gobin}/versitygw"

# `go version -m` reads the module version the binary was built from, which
# `versitygw --version` does not report for `go install` builds.
installed="$(go version -m "${bin}" 2>/dev/null | awk '$1 == "mod" && $2 == "'"${MODULE}"'" { print $3 }' || true)"
if [[ "${installed}" == "${VERSION}" ]]; then
	echo "versitygw ${VERSION} already installed at ${bin}"
	exit 0
fi

echo "installing versitygw ${VERSION} into ${gobin} (found: ${installed:-none})"
GOBIN="${gobin}" go install "${MODULE}/cmd/versitygw@${VERSION}"
"${bin}" --version >/dev/null
echo "versitygw ${VERSION} installed at ${bin}"

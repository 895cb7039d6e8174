// Package api is the HTTP API of `lethe server --api-addr` (DESIGN §11,
// docs/api.md): /api/v1/... in JSON, errors in application/problem+json
// (RFC 9457), described by openapi.yaml (served at /api/v1/openapi.yaml).
//
// It owns HTTP only: authentication (bearer tokens, internal/apitoken),
// roles (a viewer reads, an operator also writes), the cross-site check on
// writes, and the mapping of engine errors to problems. Every read and
// write calls the catalog or the same engine function the CLI calls; no
// rule of the lifecycle is implemented here. It must not import
// internal/cli.
package api

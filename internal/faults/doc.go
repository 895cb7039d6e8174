// Package faults injects the faults of the world around Lethe into tests
// that drive the real `lethe server` binaries (internal/e2e's TestFault*
// tests, `make faults`), and checks afterwards, independently of Lethe's
// engines, that nothing was lost or done twice:
//
//   - TCPProxy stands between the replicas and PostgreSQL: it cuts every
//     connection (and refuses new ones) for a while, or holds every byte
//     (a partition that heals), and delays every chunk it forwards;
//   - Check reads the catalog with raw SQL, the file storage and the test
//     plugins' record, and lists every invariant it finds broken.
//
// The S3 faults (500, 503 SlowDown, a stream cut mid-tarball) are
// internal/blobstore/s3test's Proxy. docs/faults.md has the table of
// faults tried and what Lethe does.
package faults

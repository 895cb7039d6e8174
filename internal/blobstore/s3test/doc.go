// Package s3test starts a real S3-compatible server, versitygw v1.8.0 with
// its posix backend, on loopback for tests, and returns a blobstore URL for
// a fresh bucket on it.
//
// It owns the server process and its temporary directory, nothing else. The
// binary is found through LETHE_VERSITYGW, PATH or $GOBIN/$GOPATH/bin; when it
// is missing the test is skipped, or fails when CI is set. Install it with
// .ci/versitygw.sh or:
//
//	go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
package s3test

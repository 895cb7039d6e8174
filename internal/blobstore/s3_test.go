package blobstore_test

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/blobstore/blobstoretest"
	"github.com/lethehq/lethe/internal/blobstore/s3test"
)

func TestS3Conformance(t *testing.T) {
	base := s3test.Start(t)
	n := 0
	blobstoretest.Run(t, func(t *testing.T) string {
		n++
		u, err := url.Parse(base)
		require.NoError(t, err)
		u.Path = fmt.Sprintf("/run-%d", n)
		return u.String()
	})
}

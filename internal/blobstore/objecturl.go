package blobstore

import (
	"net/url"
	"strings"
)

// ObjectURL is the URL of the object key in the store at location (a
// Store's URL): the key joins the path, before any query string, so that
// s3://bucket/prefix?endpoint=... gives s3://bucket/prefix/KEY?endpoint=...
func ObjectURL(location, key string) string {
	u, err := url.Parse(location)
	if err != nil || u.RawQuery == "" && u.Fragment == "" {
		return strings.TrimSuffix(location, "/") + "/" + key
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + key
	u.RawPath = ""
	return u.String()
}

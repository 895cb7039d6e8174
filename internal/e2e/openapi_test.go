package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	legacyrouter "github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/api"
)

// The committed OpenAPI document (internal/api/openapi.yaml), loaded and
// checked once; every answer apiClient gets is checked against it.
var (
	openapiOnce   sync.Once
	openapiRouter routers.Router
	openapiErr    error
)

func openapiDoc(t *testing.T) routers.Router {
	t.Helper()
	openapiOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(api.OpenAPI())
		if err != nil {
			openapiErr = err
			return
		}
		if openapiErr = doc.Validate(loader.Context); openapiErr != nil {
			return
		}
		openapiRouter, openapiErr = legacyrouter.NewRouter(doc)
	})
	require.NoError(t, openapiErr, "internal/api/openapi.yaml")
	return openapiRouter
}

// checkOpenAPI checks one exchange against the document: the response
// must be one the document declares for its operation, with a body of
// the declared schema; a request the document calls invalid must not
// succeed; any 2xx answer must come from a documented operation.
func checkOpenAPI(t *testing.T, req *http.Request, code int, header http.Header, body []byte) {
	t.Helper()
	router := openapiDoc(t)
	route, params, err := router.FindRoute(req)
	if err != nil {
		require.GreaterOrEqual(t, code, 400, "%s %s answered %d but is not in the OpenAPI document", req.Method, req.URL, code)
		return
	}
	ctx := context.Background()
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
		require.GreaterOrEqual(t, code, 400, "%s %s: the document calls the request invalid (%v), yet it succeeded", req.Method, req.URL, err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: code, Header: header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	require.NoError(t, openapi3filter.ValidateResponse(ctx, out), "%s %s → %d %s", req.Method, req.URL, code, body)
}

// TestOpenAPIDocument: the document is valid OpenAPI 3, the server serves
// the committed one, and it documents every route of the API.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	openapiDoc(t)
	e := newEnv(t)
	viewer := createToken(t, e, "dash", "viewer")
	c := startAPI(t, e, "--no-plugins")
	r := c.do("GET", "/api/v1/openapi.yaml", viewer)
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, string(api.OpenAPI()), r.body)
	for _, rt := range api.Routes() {
		req, err := http.NewRequest(rt.Method, "http://x"+regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(rt.Pattern, "1"), nil)
		require.NoError(t, err)
		_, _, err = openapiDoc(t).FindRoute(req)
		require.NoError(t, err, "%s %s is served but not documented", rt.Method, rt.Pattern)
	}
}

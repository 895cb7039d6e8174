package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// Config tunes Open. The zero value is valid; a nil *Config means the zero
// value.
type Config struct {
	// AccessKeyID and SecretAccessKey are static S3 credentials. When both
	// are empty, credentials come from the URL's user info
	// (s3://KEY:SECRET@bucket/...), or else from the AWS default chain
	// (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, shared config files, ...).
	AccessKeyID     string
	SecretAccessKey string
	// MustExist refuses a file:// directory that does not exist
	// (ErrNotExist) instead of creating it: a misspelt location is not
	// created by accident.
	MustExist bool
	// List bounds each listing; zero fields take the defaults.
	List ListLimits
	// S3 bounds the waits on an s3:// endpoint; zero fields take the
	// defaults.
	S3 S3Timeouts
}

// ErrNotExist is the error of a file:// directory that does not exist, opened with
// Config.MustExist.
var ErrNotExist = errors.New("the directory does not exist")

func (c *Config) validate() error {
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return errors.New("AccessKeyID and SecretAccessKey must be set together")
	}
	return nil
}

// Tuning that bounds the memory of one S3 upload: the SDK's transfer manager
// keeps s3UploadConcurrency+1 part buffers of s3PartSize bytes, and reads up
// to its 16 MiB multipart threshold before the first part, so a Put holds
// about 40 MiB whatever the object's size. 8 MiB parts allow objects up to
// 80 GB (10,000 parts).
const (
	s3PartSize          = 8 << 20
	s3UploadConcurrency = 2
)

// Directory and file modes of the file:// store. Backups hold Kubernetes
// secrets, so only the owner may read them.
const (
	fileDirMode  = 0o700
	fileFileMode = 0o600
)

// s3Params are the query parameters an s3:// URL accepts.
var s3Params = []string{"endpoint", "region", "use_path_style"}

// Open opens the store at rawURL with the zero Config. See OpenConfig.
func Open(ctx context.Context, rawURL string) (Store, error) {
	return OpenConfig(ctx, rawURL, nil)
}

// OpenConfig opens the store at rawURL. Two schemes are supported:
//
//	file:///abs/dir
//
// The directory is created (mode 0700) if missing, unless
// Config.MustExist. Objects are written to a
// temporary file beside their final path and renamed into place; no ".attrs"
// sidecar files are written.
//
//	s3://[KEY:SECRET@]bucket[/prefix]?endpoint=URL&region=REGION&use_path_style=BOOL
//
// All query parameters are optional: endpoint is the S3 endpoint for
// S3-compatible servers (e.g. http://127.0.0.1:7070), region falls back to
// AWS_REGION / the shared config, and use_path_style=true addresses the bucket
// in the path rather than the host name. A prefix scopes every key of the
// store under "prefix/". An s3:// Put buffers about 40 MiB whatever the
// object's size; reads stream.
//
// Errors are one line and never contain credentials.
func OpenConfig(ctx context.Context, rawURL string, cfg *Config) (Store, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("blobstore: open: %w", err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the raw URL, which may carry credentials.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("blobstore: invalid storage URL: %w", err)
	}
	switch u.Scheme {
	case "file":
		return openFile(u, cfg)
	case "s3":
		return openS3(ctx, u, cfg)
	case "":
		return nil, fmt.Errorf("blobstore: storage URL %q has no scheme; want file:///abs/dir or s3://bucket/prefix", redact(u))
	default:
		return nil, fmt.Errorf("blobstore: unsupported storage URL scheme %q in %q; want file:// or s3://", u.Scheme, redact(u))
	}
}

// redacted replaces a secret in a displayed address.
const redacted = "xxxxx"

// RedactURL returns a storage address fit to display in a banner, an
// error, an audit entry or a log: the one function every caller uses to
// show a storage address (Store.URL is built the same way).
//
//   - user info (s3://KEY:SECRET@bucket) is dropped;
//   - region and use_path_style are kept, and endpoint is kept without its
//     own user info, query or fragment;
//   - the value of any other query parameter becomes xxxxx: s3:// refuses
//     unknown parameters, but the error that says so must not echo a
//     session token or a signature;
//   - a fragment becomes xxxxx;
//   - an address it cannot parse is reduced to its scheme.
func RedactURL(raw string) string {
	s := strings.TrimSpace(raw)
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		scheme, _, ok := strings.Cut(s, ":")
		if !ok || strings.ContainsAny(scheme, "@/?#= ") {
			return "(address hidden: it does not parse)"
		}
		return scheme + ":(rest hidden: it does not parse)"
	}
	return redact(u)
}

// redact is RedactURL on a parsed URL.
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	if at := strings.LastIndex(c.Opaque, "@"); at >= 0 {
		// KEY:SECRET@bucket without "//" parses as scheme KEY.
		return redacted + c.Opaque[at:]
	}
	c.RawQuery = redactQuery(c.RawQuery)
	if c.Fragment != "" {
		c.Fragment, c.RawFragment = redacted, ""
	}
	return c.String()
}

// redactQuery redacts a raw query as RedactURL says, keeping the order and
// the encoding of what it keeps.
func redactQuery(raw string) string {
	if raw == "" {
		return ""
	}
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		k, v, hasValue := strings.Cut(p, "=")
		if !hasValue {
			continue
		}
		key, err := url.QueryUnescape(k)
		if err != nil {
			parts[i] = k + "=" + redacted
			continue
		}
		switch key {
		case "region", "use_path_style":
		case "endpoint":
			if ev, err := url.QueryUnescape(v); err != nil {
				parts[i] = k + "=" + redacted
			} else if shown := redactEndpoint(ev); shown != ev {
				parts[i] = k + "=" + url.QueryEscape(shown)
			}
		default:
			parts[i] = k + "=" + redacted
		}
	}
	return strings.Join(parts, "&")
}

// redactEndpoint returns an endpoint URL (an s3:// URL's endpoint
// parameter, unescaped) with only its scheme, host and path.
func redactEndpoint(v string) string {
	eu, err := url.Parse(v)
	if err != nil || eu.Opaque != "" {
		return redacted
	}
	if eu.User == nil && eu.RawQuery == "" && eu.Fragment == "" && !eu.ForceQuery {
		return v
	}
	eu.User, eu.RawQuery, eu.Fragment, eu.RawFragment, eu.ForceQuery = nil, "", "", "", false
	return eu.String()
}

func openFile(u *url.URL, cfg *Config) (Store, error) {
	shown := redact(u)
	switch {
	case u.Opaque != "":
		return nil, fmt.Errorf("blobstore: file URL %q must be file:///absolute/dir", shown)
	case u.User != nil:
		return nil, fmt.Errorf("blobstore: file URL %q must not carry user info", shown)
	case u.Host != "" && u.Host != "localhost":
		return nil, fmt.Errorf("blobstore: file URL %q has host %q; want file:///absolute/dir (three slashes)", shown, u.Host)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("blobstore: file URL %q must not have a query or fragment", shown)
	case u.Path == "" || !filepath.IsAbs(u.Path):
		return nil, fmt.Errorf("blobstore: file URL %q needs an absolute directory", shown)
	}
	dir := filepath.Clean(u.Path)
	if cfg.MustExist {
		if fi, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("blobstore: %s: %w", shown, ErrNotExist)
		} else if err == nil && !fi.IsDir() {
			return nil, fmt.Errorf("blobstore: %s: not a directory", shown)
		}
	}
	if err := os.MkdirAll(dir, fileDirMode); err != nil {
		return nil, fmt.Errorf("blobstore: create store directory: %w", err)
	}
	// Objects are files beneath dir, reached through os.Root (filestore.go).
	// Temporary files sit beside their final path so that the rename is
	// atomic; List hides them.
	shownURL := (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()
	return &store{url: shownURL, kind: kindFile, dir: dir, limits: cfg.List}, nil
}

func openS3(ctx context.Context, u *url.URL, cfg *Config) (Store, error) {
	shown := redact(u)
	fail := func(format string, args ...any) error {
		return fmt.Errorf("blobstore: s3 URL %q: %s", shown, fmt.Sprintf(format, args...))
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, fail("want s3://bucket/prefix?endpoint=...")
	}
	if u.Fragment != "" {
		return nil, fail("must not have a fragment")
	}
	bucketName := u.Host
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		for seg := range strings.SplitSeq(prefix, "/") {
			if seg == "" || seg == "." || seg == ".." {
				return nil, fail("prefix %q has an empty, \".\" or \"..\" segment", prefix)
			}
		}
	}

	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fail("bad query: %v", err)
	}
	for k, v := range q {
		if !slices.Contains(s3Params, k) {
			return nil, fail("unknown query parameter %q (known: %s)", k, strings.Join(s3Params, ", "))
		}
		if len(v) != 1 {
			return nil, fail("query parameter %q given %d times", k, len(v))
		}
	}
	endpoint := q.Get("endpoint")
	if endpoint != "" {
		eu, err := url.Parse(endpoint)
		if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" {
			return nil, fail("endpoint %q must be an http:// or https:// URL", redactEndpoint(endpoint))
		}
	}
	pathStyle := false
	if v := q.Get("use_path_style"); v != "" {
		pathStyle, err = strconv.ParseBool(v)
		if err != nil {
			return nil, fail("use_path_style=%q is not a boolean", v)
		}
	}

	accessKey, secretKey := cfg.AccessKeyID, cfg.SecretAccessKey
	if accessKey == "" && u.User != nil {
		accessKey = u.User.Username()
		secretKey, _ = u.User.Password()
		if accessKey == "" || secretKey == "" {
			return nil, fail("user info must be KEY:SECRET")
		}
	}

	var loadOpts []func(*config.LoadOptions) error
	if region := q.Get("region"); region != "" {
		loadOpts = append(loadOpts, config.WithRegion(region))
	}
	if accessKey != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(accessKey, secretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fail("load AWS config: %v", err)
	}
	// An HTTP client of our own, so that Close can drop its idle
	// connections. Its transport is the SDK's, with whatever the config
	// applied to it (AWS_CA_BUNDLE, for one).
	var transport *http.Transport
	switch c := awsCfg.HTTPClient.(type) {
	case nil:
		transport = awshttp.NewBuildableClient().GetTransport()
	case *awshttp.BuildableClient:
		transport = c.GetTransport()
	default:
		return nil, fail("unexpected AWS HTTP client %T", c)
	}
	// An endpoint that never answers, or drips its answer, fails the
	// request instead of holding it for ever.
	tmo := cfg.S3.withDefaults()
	transport.ResponseHeaderTimeout = tmo.ResponseHeaderTimeout
	awsCfg.HTTPClient = &http.Client{
		Transport: &slowReadTransport{next: transport, t: tmo},
		// The SDK wants to see S3's redirects, not follow them.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if awsCfg.Region == "" {
		return nil, fail("no region: add ?region=... or set AWS_REGION")
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = pathStyle
		// Multipart objects have no whole-object checksum to validate; the
		// SDK would log a warning on every such read.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	bkt, err := s3blob.OpenBucket(ctx, client, bucketName, &s3blob.Options{
		// The upload manager does not take this from the client's config.
		RequestChecksumCalculation: awsCfg.RequestChecksumCalculation,
	})
	if err != nil {
		return nil, fail("%v", err)
	}
	if prefix != "" {
		bkt = blob.PrefixedBucket(bkt, prefix+"/")
	}
	shownURL := url.URL{Scheme: "s3", Host: bucketName, RawQuery: redactQuery(u.RawQuery)}
	if prefix != "" {
		shownURL.Path = "/" + path.Clean(prefix)
	}
	return &store{
		bucket:         bkt,
		url:            shownURL.String(),
		kind:           kindS3,
		closeTransport: transport.CloseIdleConnections,
		limits:         cfg.List,
	}, nil
}

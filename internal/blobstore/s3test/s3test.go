package s3test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Version is the versitygw release the tests are written against.
const Version = "v1.8.0"

// InstallCommand installs the server binary.
const InstallCommand = "go install github.com/versity/versitygw/cmd/versitygw@" + Version

// Fixed test credentials and location of the server.
const (
	AccessKey = "lethe-test-access"
	SecretKey = "lethe-test-secret/+key"
	Region    = "us-east-1"
	Bucket    = "lethe-test"
)

// EnvBinary names the variable that points at the versitygw binary.
const EnvBinary = "LETHE_VERSITYGW"

// startTimeout bounds how long the server may take to answer.
const startTimeout = 30 * time.Second

// Server is a running versitygw.
type Server struct {
	// Endpoint is the server's base URL, http://127.0.0.1:PORT.
	Endpoint string
	// URL is a blobstore URL for Bucket, credentials included:
	// s3://KEY:SECRET@lethe-test?endpoint=...&region=us-east-1&use_path_style=true
	URL string
	// Dir is the posix backend's root; Bucket is a directory under it.
	Dir string
}

// Start starts a server with an empty bucket and returns its blobstore URL.
// The server is killed when the test ends.
func Start(t testing.TB) string {
	t.Helper()
	return StartServer(t).URL
}

// StartServer is Start, returning more about the server.
func StartServer(t testing.TB) *Server {
	t.Helper()
	return StartServerWith(t, AccessKey, SecretKey)
}

// StartServerWith is StartServer with other credentials: two servers with
// different keys are two locations that share none.
func StartServerWith(t testing.TB, accessKey, secretKey string) *Server {
	t.Helper()
	bin, err := FindBinary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("s3test: %v (CI is set, so this is a failure, not a skip)", err)
		}
		t.Skipf("s3test: %v; install it with .ci/versitygw.sh or %q, or set %s", err, InstallCommand, EnvBinary)
	}

	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatalf("s3test: %v", err)
	}
	// A port can be taken between our probe and the server's bind; retry.
	var endpoint string
	for attempt := 1; ; attempt++ {
		endpoint, err = start(t, bin, root, filepath.Join(dir, fmt.Sprintf("versitygw-%d.log", attempt)), accessKey, secretKey)
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatalf("s3test: %v", err)
		}
	}
	if err := createBucket(t.Context(), endpoint, accessKey, secretKey); err != nil {
		t.Fatalf("s3test: create bucket %q: %v", Bucket, err)
	}

	q := url.Values{}
	q.Set("endpoint", endpoint)
	q.Set("region", Region)
	q.Set("use_path_style", "true")
	u := url.URL{
		Scheme:   "s3",
		User:     url.UserPassword(accessKey, secretKey),
		Host:     Bucket,
		RawQuery: q.Encode(),
	}
	return &Server{Endpoint: endpoint, URL: u.String(), Dir: root}
}

// FindBinary looks for versitygw in $LETHE_VERSITYGW, PATH, $GOBIN, and
// $GOPATH/bin (default ~/go/bin).
func FindBinary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%q: %w", EnvBinary, p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if home, err := os.UserHomeDir(); err == nil {
			gopath = filepath.Join(home, "go")
		}
	}
	for _, p := range filepath.SplitList(gopath) {
		dirs = append(dirs, filepath.Join(p, "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "versitygw")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("versitygw binary not found in $%s, PATH or %s", EnvBinary, strings.Join(dirs, ", "))
}

// start runs the server on a free loopback port and waits until it answers.
// On error the process is already gone.
func start(t testing.TB, bin, root, logPath, accessKey, secretKey string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logFile.Close() // The child has its own descriptor.

	cmd := exec.Command(bin,
		"--access", accessKey,
		"--secret", secretKey,
		"--region", Region,
		"--port", addr,
		"--quiet",
		"posix", root,
	)
	// An *os.File needs no copying goroutines, so nothing outlives Wait.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	setProcAttrs(cmd)
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		killGroup(cmd)
		<-exited //nolint:errcheck // killed on purpose: Wait reports the kill
	}

	endpoint := "http://" + addr
	if err := waitReady(t.Context(), endpoint, exited); err != nil {
		stop()
		log, _ := os.ReadFile(logPath)
		return "", fmt.Errorf("versitygw on %s: %w; its output: %q", addr, err, strings.TrimSpace(string(log)))
	}
	t.Cleanup(stop)
	return endpoint, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls endpoint until it answers HTTP at all (an unsigned request
// gets 403), the process exits, or startTimeout passes.
func waitReady(ctx context.Context, endpoint string, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	transport := &http.Transport{DisableKeepAlives: true}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/", nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited before answering: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("no answer within %v", startTimeout)
		case <-tick.C:
		}
	}
}

func createBucket(ctx context.Context, endpoint, accessKey, secretKey string) error {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	client := s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(accessKey, secretKey, ""),
		HTTPClient:   &http.Client{Transport: transport},
	})
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(Bucket)})
	return err
}

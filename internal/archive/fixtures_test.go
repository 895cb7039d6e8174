package archive_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/termtext"
)

var update = flag.Bool("update", false, "rewrite the fixtures under testdata/")

// fixture is one tarball under testdata/<name>/. Its bytes are generated
// here, deterministically; TestFixturesUpToDate checks the committed copy.
type fixture struct {
	name  string
	file  string // backup.tgz unless set
	build func() ([]byte, error)
}

func (f fixture) path() string {
	return filepath.Join("testdata", f.name, cmpOr(f.file, "backup.tgz"))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

const (
	podPath = "resources/pods/namespaces/default/web-0.json"
	podJSON = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"default","labels":{"app":"web"}},"spec":{}}`
)

// Item paths with names that would drive a terminal.
const (
	escPath  = "resources/pods/namespaces/default/web\x1b[2J\x1b]52;c;ZXZpbA==\x07.json"
	nlPath   = "resources/pods/namespaces/default/web\nlevel=INFO msg=FORGED.json"
	bidiPath = "resources/pods/namespaces/de\u202efault/web-0.json"
	c1Path   = "resources/persistentvolumes/cluster/pv\u009b31m.json"
)

var versionEntry = archivetest.Entry{Name: "metadata/version", Body: []byte("1.1.0\n")}

func entries(c archivetest.Compression, es ...archivetest.Entry) func() ([]byte, error) {
	return func() ([]byte, error) {
		var buf bytes.Buffer
		err := archivetest.WriteEntries(&buf, es, c)
		return buf.Bytes(), err
	}
}

// withVersion prepends metadata/version to entries.
func withVersion(c archivetest.Compression, es ...archivetest.Entry) func() ([]byte, error) {
	return entries(c, append([]archivetest.Entry{versionEntry}, es...)...)
}

func item(path, body string) archivetest.Entry {
	return archivetest.Entry{Name: path, Body: []byte(body)}
}

func validSpecs() []archivetest.ItemSpec {
	out := make([]archivetest.ItemSpec, 14)
	for i := range out {
		out[i] = archivetest.SpecN(i, 200)
	}
	return out
}

func written(items []archivetest.ItemSpec, opts archivetest.Options) func() ([]byte, error) {
	return func() ([]byte, error) {
		var buf bytes.Buffer
		err := archivetest.Write(&buf, items, opts)
		return buf.Bytes(), err
	}
}

// bomb is an archive of metadata/version and n zero bytes in one ignored
// file, built when asked so the package holds no such buffer.
func bomb(c archivetest.Compression, n int) func() ([]byte, error) {
	return func() ([]byte, error) {
		return withVersion(c, archivetest.Entry{Name: "resources/pods/blob.bin", Body: make([]byte, n)})()
	}
}

func cut(build func() ([]byte, error), keep func(n int) int) func() ([]byte, error) {
	return func() ([]byte, error) {
		b, err := build()
		return b[:keep(len(b))], err
	}
}

func appendBytes(build func() ([]byte, error), tail string) func() ([]byte, error) {
	return func() ([]byte, error) {
		b, err := build()
		return append(b, tail...), err
	}
}

// deployJSON is a deployments.apps item in apiVersion apps/<version>.
func deployJSON(version, name string) string {
	return `{"apiVersion":"apps/` + version + `","kind":"Deployment","metadata":{"name":"` + name + `","namespace":"shop"}}`
}

// versionedEntries: items with v1-preferredversion and v1beta1 copies,
// one copy before its item, and one item present only as copies.
func versionedEntries() []archivetest.Entry {
	d := "resources/deployments.apps/"
	return []archivetest.Entry{
		versionEntry,
		item(d+"namespaces/shop/api.json", deployJSON("v1", "api")),
		item(d+"v1-preferredversion/namespaces/shop/api.json", deployJSON("v1", "api")),
		item(d+"v1beta1/namespaces/shop/api.json", deployJSON("v1beta1", "api")),
		// The copies come first here.
		item(d+"v1beta1/namespaces/shop/cart.json", deployJSON("v1beta1", "cart")),
		item(d+"v1-preferredversion/namespaces/shop/cart.json", deployJSON("v1", "cart")),
		item(d+"namespaces/shop/cart.json", deployJSON("v1", "cart")),
		// Only copies: yielded once, at the end, from -preferredversion.
		item(d+"v1beta1/namespaces/shop/late.json", deployJSON("v1beta1", "late")),
		item(d+"v1-preferredversion/namespaces/shop/late.json", deployJSON("v1", "late")),
		item("resources/namespaces/cluster/shop.json", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"shop"}}`),
		item("resources/namespaces/v1-preferredversion/cluster/shop.json", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"shop"}}`),
		// Ignored: not .json, and outside resources/.
		item("resources/deployments.apps/README", "ignored"),
		item("metadata/extra.json", "not even JSON"),
		{Name: "resources/", Type: tar.TypeDir},
	}
}

var validFixtures = []fixture{
	{name: "valid-gzip", build: written(validSpecs(), archivetest.Options{PreferredVersionCopies: true})},
	{name: "valid-zstd", file: "backup.tar.zst", build: written(validSpecs(), archivetest.Options{Compression: archivetest.Zstd, PreferredVersionCopies: true})},
	{name: "preferredversion", build: entries(archivetest.Gzip, versionedEntries()...)},
}

// hostileCase is a fixture that must be rejected.
type hostileCase struct {
	fixture
	lim   archive.Limits
	kind  error
	entry string
}

var hostileCases = []hostileCase{
	{fixture{name: "traversal", build: withVersion(archivetest.Gzip, item("resources/pods/namespaces/default/../../../../../etc/cron.d/x.json", podJSON))},
		archive.Limits{}, archive.ErrUnsafePath, "resources/pods/namespaces/default/../../../../../etc/cron.d/x.json"},
	{fixture{name: "traversal-leading", build: withVersion(archivetest.Gzip, item("../escape.json", podJSON))},
		archive.Limits{}, archive.ErrUnsafePath, "../escape.json"},
	{fixture{name: "absolute-path", build: withVersion(archivetest.Gzip, item("/etc/passwd", "root"))},
		archive.Limits{}, archive.ErrUnsafePath, "/etc/passwd"},
	{fixture{name: "symlink", build: withVersion(archivetest.Gzip, archivetest.Entry{Name: podPath, Type: tar.TypeSymlink, Linkname: "/etc/shadow"})},
		archive.Limits{}, archive.ErrEntryType, podPath},
	{fixture{name: "hardlink", build: withVersion(archivetest.Gzip, item(podPath, podJSON), archivetest.Entry{Name: "resources/pods/namespaces/default/web-1.json", Type: tar.TypeLink, Linkname: podPath})},
		archive.Limits{}, archive.ErrEntryType, "resources/pods/namespaces/default/web-1.json"},
	{fixture{name: "device", build: withVersion(archivetest.Gzip, archivetest.Entry{Name: "resources/sda", Type: tar.TypeBlock})},
		archive.Limits{}, archive.ErrEntryType, "resources/sda"},
	{fixture{name: "fifo", build: withVersion(archivetest.Gzip, archivetest.Entry{Name: "metadata/pipe", Type: tar.TypeFifo})},
		archive.Limits{}, archive.ErrEntryType, "metadata/pipe"},
	{fixture{name: "entry-over-cap", build: withVersion(archivetest.Gzip, archivetest.Entry{Name: podPath, Body: []byte("{"), Size: 1 << 40})},
		archive.Limits{}, archive.ErrTooLarge, podPath},
	{fixture{name: "total-over-cap", build: written(validSpecs(), archivetest.Options{})},
		archive.Limits{MaxTotalSize: 8 << 10}, archive.ErrTooLarge, "resources/clusterroles.rbac.authorization.k8s.io/cluster/clusterrole-6.json"},
	{fixture{name: "too-many-entries", build: written(validSpecs(), archivetest.Options{})},
		archive.Limits{MaxEntries: 5}, archive.ErrTooManyEntries, "resources/volumesnapshots.snapshot.storage.k8s.io/namespaces/ns-4/volumesnapshot-4.json"},
	{fixture{name: "gzip-bomb", build: bomb(archivetest.Gzip, 12<<20)},
		archive.Limits{}, archive.ErrBomb, "resources/pods/blob.bin"},
	{fixture{name: "zstd-bomb", file: "backup.tar.zst", build: bomb(archivetest.Zstd, 12<<20)},
		archive.Limits{}, archive.ErrBomb, "resources/pods/blob.bin"},
	{fixture{name: "truncated-gzip", build: cut(written(validSpecs(), archivetest.Options{}), func(n int) int { return n / 2 })},
		archive.Limits{}, archive.ErrTruncated, ""},
	{fixture{name: "truncated-zstd", file: "backup.tar.zst", build: cut(written(validSpecs(), archivetest.Options{Compression: archivetest.Zstd}), func(n int) int { return n / 2 })},
		archive.Limits{}, archive.ErrTruncated, ""},
	{fixture{name: "truncated-gzip-trailer", build: cut(written(validSpecs(), archivetest.Options{}), func(n int) int { return n - 4 })},
		archive.Limits{}, archive.ErrTruncated, ""},
	{fixture{name: "trailing-garbage", build: appendBytes(written(validSpecs(), archivetest.Options{}), "#!/bin/sh\nrm -rf /\n")},
		archive.Limits{}, archive.ErrCorrupt, ""},
	{fixture{name: "not-compressed", file: "backup.tar", build: written(validSpecs(), archivetest.Options{Compression: archivetest.None})},
		archive.Limits{}, archive.ErrCorrupt, ""},
	{fixture{name: "invalid-json", build: withVersion(archivetest.Gzip, item(podPath, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0",`))},
		archive.Limits{}, archive.ErrInvalidJSON, podPath},
	{fixture{name: "not-an-object", build: withVersion(archivetest.Gzip, item(podPath, `["web-0"]`))},
		archive.Limits{}, archive.ErrInvalidJSON, podPath},
	{fixture{name: "duplicate-path", build: withVersion(archivetest.Gzip, item(podPath, podJSON), item(podPath, podJSON))},
		archive.Limits{}, archive.ErrDuplicate, podPath},
	{fixture{name: "duplicate-dot-slash", build: withVersion(archivetest.Gzip, item(podPath, podJSON), item("./"+podPath, podJSON))},
		archive.Limits{}, archive.ErrDuplicate, "./" + podPath},
	{fixture{name: "duplicate-in-version-dir", build: withVersion(archivetest.Gzip,
		item(podPath, podJSON),
		item("resources/pods/v1-preferredversion/namespaces/default/web-0.json", podJSON),
		item("./resources/pods/v1-preferredversion/namespaces/default/web-0.json", podJSON))},
		archive.Limits{}, archive.ErrDuplicate, "./resources/pods/v1-preferredversion/namespaces/default/web-0.json"},
	{fixture{name: "duplicate-json-key", build: withVersion(archivetest.Gzip, item(podPath, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"default","name":"db-0"}}`))},
		archive.Limits{}, archive.ErrInvalidJSON, podPath},
	{fixture{name: "name-mismatch", build: withVersion(archivetest.Gzip, item(podPath, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"db-0","namespace":"default"}}`))},
		archive.Limits{}, archive.ErrMismatch, podPath},
	{fixture{name: "namespace-mismatch", build: withVersion(archivetest.Gzip, item(podPath, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"kube-system"}}`))},
		archive.Limits{}, archive.ErrMismatch, podPath},
	{fixture{name: "cluster-with-namespace", build: withVersion(archivetest.Gzip, item("resources/persistentvolumes/cluster/pv-1.json", `{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pv-1","namespace":"default"}}`))},
		archive.Limits{}, archive.ErrMismatch, "resources/persistentvolumes/cluster/pv-1.json"},
	{fixture{name: "group-mismatch", build: withVersion(archivetest.Gzip, item("resources/deployments.apps/namespaces/shop/api.json", `{"apiVersion":"v1","kind":"Deployment","metadata":{"name":"api","namespace":"shop"}}`))},
		archive.Limits{}, archive.ErrMismatch, "resources/deployments.apps/namespaces/shop/api.json"},
	{fixture{name: "version-dir-mismatch", build: withVersion(archivetest.Gzip,
		item("resources/deployments.apps/namespaces/shop/api.json", deployJSON("v1", "api")),
		item("resources/deployments.apps/v1beta1/namespaces/shop/api.json", deployJSON("v1", "api")))},
		archive.Limits{}, archive.ErrMismatch, "resources/deployments.apps/v1beta1/namespaces/shop/api.json"},
	{fixture{name: "escape-in-name", build: withVersion(archivetest.Gzip, item(escPath, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web\u001b[2J\u001b]52;c;ZXZpbA==\u0007","namespace":"default"}}`))},
		archive.Limits{}, archive.ErrUnsafeName, escPath},
	{fixture{name: "newline-in-name", build: withVersion(archivetest.Gzip, item(nlPath, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web\nlevel=INFO msg=FORGED","namespace":"default"}}`))},
		archive.Limits{}, archive.ErrUnsafeName, nlPath},
	{fixture{name: "bidi-in-namespace", build: withVersion(archivetest.Gzip, item(bidiPath, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"de\u202efault"}}`))},
		archive.Limits{}, archive.ErrUnsafeName, bidiPath},
	{fixture{name: "c1-in-cluster-name", build: withVersion(archivetest.Gzip, item(c1Path, `{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pv\u009b31m"}}`))},
		archive.Limits{}, archive.ErrUnsafeName, c1Path},
	{fixture{name: "bad-layout", build: withVersion(archivetest.Gzip, item("resources/pods/default/web-0.json", podJSON))},
		archive.Limits{}, archive.ErrLayout, "resources/pods/default/web-0.json"},
	{fixture{name: "missing-version", build: entries(archivetest.Gzip, item(podPath, podJSON))},
		archive.Limits{}, archive.ErrVersion, "metadata/version"},
	{fixture{name: "unsupported-version", build: entries(archivetest.Gzip, archivetest.Entry{Name: "metadata/version", Body: []byte("2.0.0\n")}, item(podPath, podJSON))},
		archive.Limits{}, archive.ErrVersion, "metadata/version"},
}

func allFixtures() []fixture {
	out := append([]fixture(nil), validFixtures...)
	for _, h := range hostileCases {
		out = append(out, h.fixture)
	}
	return out
}

// TestFixturesUpToDate checks that the committed fixtures are what the
// generator writes. Run `go test -run TestFixturesUpToDate -update` to
// rewrite them.
func TestFixturesUpToDate(t *testing.T) {
	for _, f := range allFixtures() {
		t.Run(f.name, func(t *testing.T) {
			want, err := f.build()
			require.NoError(t, err)
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(f.path()), 0o755))
				require.NoError(t, os.WriteFile(f.path(), want, 0o644))
			}
			got, err := os.ReadFile(f.path())
			require.NoError(t, err, "run: go test ./internal/archive -run TestFixturesUpToDate -update")
			require.Equal(t, want, got, "fixture %s is stale or the generator is not deterministic", f.path())
			require.Less(t, len(got), 64<<10, "keep fixtures small")
		})
	}
}

func TestHostileTarballsAreRejected(t *testing.T) {
	for _, tc := range hostileCases {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(tc.path())
			require.NoError(t, err)
			_, err = archive.Validate(bytes.NewReader(data), tc.lim)
			require.Error(t, err)
			require.ErrorIs(t, err, archive.ErrHostile)
			require.ErrorIs(t, err, tc.kind)
			var ae *archive.Error
			require.True(t, errors.As(err, &ae))
			if tc.entry != "" {
				require.Equal(t, tc.entry, ae.Entry)
				require.Contains(t, err.Error(), strconv.Quote(tc.entry), "the message names the entry, quoted")
			}
			require.NotContains(t, err.Error(), "\n", "one line")
			require.True(t, termtext.Plain(err.Error()), "no raw control character in %q", err.Error())
			t.Log(err)

			// Reading item by item fails the same way, and stays failed.
			rd, err := archive.NewReader(bytes.NewReader(data), tc.lim)
			if err == nil {
				for err == nil {
					_, err = rd.Next()
				}
				_, again := rd.Next()
				require.Equal(t, err, again, "errors are sticky")
			}
			require.ErrorIs(t, err, tc.kind)
		})
	}
}

func TestPreferredVersionCopiesAreDeduplicated(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "preferredversion", "backup.tgz"))
	require.NoError(t, err)
	items, _ := readAll(t, data)
	var got []string
	for i, it := range items {
		require.Equal(t, int64(i), it.Ordinal)
		got = append(got, it.Path)
	}
	require.Equal(t, []string{
		"resources/deployments.apps/namespaces/shop/api.json",
		"resources/deployments.apps/namespaces/shop/cart.json",
		"resources/namespaces/cluster/shop.json",
		// An item present only as copies comes last, from its preferred version.
		"resources/deployments.apps/v1-preferredversion/namespaces/shop/late.json",
	}, got)
	late := items[3]
	require.Equal(t, "deployments.apps/shop/late", late.Key())
	require.Equal(t, "v1", late.Version)
	require.JSONEq(t, deployJSON("v1", "late"), string(late.Object))

	sum, err := archive.Validate(bytes.NewReader(data), archive.Limits{})
	require.NoError(t, err)
	require.Equal(t, int64(4), sum.Items)
	require.Equal(t, int64(6), sum.Copies)
	require.Equal(t, map[string]int64{"deployments.apps": 3, "namespaces": 1}, sum.ByResource)
}

func TestValidFixtures(t *testing.T) {
	for _, f := range validFixtures[:2] {
		t.Run(f.name, func(t *testing.T) {
			data, err := os.ReadFile(f.path())
			require.NoError(t, err)
			items, _ := readAll(t, data)
			want := validSpecs()
			require.Len(t, items, len(want))
			seen := map[string]bool{}
			for i, it := range items {
				require.Equal(t, want[i].Key(), it.Key())
				require.False(t, seen[it.Key()])
				seen[it.Key()] = true
			}
		})
	}
}

func TestCopiesBeforeItemsAreBounded(t *testing.T) {
	var es []archivetest.Entry
	es = append(es, versionEntry)
	for i := range 100 {
		n := "d" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		es = append(es, item("resources/deployments.apps/v1-preferredversion/namespaces/shop/"+n+".json", deployJSON("v1", n)))
	}
	data, err := entries(archivetest.Gzip, es...)()
	require.NoError(t, err)
	_, err = archive.Validate(bytes.NewReader(data), archive.Limits{MaxPendingSize: 8 << 10})
	require.ErrorIs(t, err, archive.ErrTooLarge)
	sum, err := archive.Validate(bytes.NewReader(data), archive.Limits{})
	require.NoError(t, err)
	require.Equal(t, int64(100), sum.Items, "copies without items are yielded, not lost")
}

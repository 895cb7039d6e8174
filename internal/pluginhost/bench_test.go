package pluginhost

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
	pluginv1 "github.com/lethehq/lethe/proto/lethe/plugin/v1"
)

// item1KiB is a 1 KiB item, like the budget's.
func item1KiB() plugin.Item {
	obj := make([]byte, 1024)
	copy(obj, `{"metadata":{"name":"x"}}`)
	for i := 25; i < len(obj); i++ {
		obj[i] = ' '
	}
	return plugin.Item{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespace: "ns", Name: "x", Object: obj}
}

var benchOpts = SessionOptions{}

// Items per benchmark operation, so that `make bench` (-benchtime 1x) gives
// real figures.
const (
	dispatchItems = 200_000
	unaryItems    = 5_000
)

// BenchmarkDispatch measures items/s of 1 KiB items through one
// out-of-process noop plugin, with streaming batches: 200k items per op.
func BenchmarkDispatch(b *testing.B) {
	dir := pluginDir(b)
	addBinary(b, dir, "noop")
	h := newHost(b, &Config{Dir: dir})
	ctx := context.Background()
	it := item1KiB()
	s, err := h.OpenSession(ctx, "noop", plugin.Backup{Name: "bench"}, benchOpts)
	require.NoError(b, err)
	defer s.Close()
	var wg sync.WaitGroup
	var n int
	wg.Go(func() {
		for r := range s.Results() {
			if r.Outcome != plugin.OutcomeDone {
				panic(r.Message)
			}
			n++
		}
	})
	total := b.N * dispatchItems
	b.SetBytes(int64(len(it.Object)) * dispatchItems)
	b.ResetTimer()
	start := time.Now()
	for i := range total {
		if err := s.Send(ctx, Item{ID: uint64(i), Item: it}); err != nil {
			b.Fatal(err)
		}
	}
	s.CloseSend()
	wg.Wait()
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "items/s")
	require.Equal(b, total, n)
}

// BenchmarkUnaryBaseline measures the same with one call per item carrying
// the backup, the way Velero calls its plugins: an Execute stream per item,
// 5,000 items per op.
func BenchmarkUnaryBaseline(b *testing.B) {
	dir := pluginDir(b)
	addBinary(b, dir, "noop")
	h := newHost(b, &Config{Dir: dir})
	p, err := h.plugins["lethe.io/noop"].bin.acquire(context.Background())
	require.NoError(b, err)
	backup := backupToProto(plugin.Backup{Name: "bench", Labels: map[string]string{"app": "bench"}})
	it := &pluginv1.Item{}
	itemToProto(it, Item{Item: item1KiB()})
	b.SetBytes(int64(len(it.Object)) * unaryItems)
	b.ResetTimer()
	start := time.Now()
	for range b.N * unaryItems {
		st, err := p.stubs.Action.Execute(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Send(&pluginv1.ExecuteRequest{Msg: &pluginv1.ExecuteRequest_Start{Start: &pluginv1.ExecuteStart{Plugin: "lethe.io/noop", Backup: backup}}}); err != nil {
			b.Fatal(err)
		}
		if err := st.Send(&pluginv1.ExecuteRequest{Msg: &pluginv1.ExecuteRequest_Batch{Batch: &pluginv1.ItemBatch{Items: []*pluginv1.Item{it}}}}); err != nil {
			b.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			b.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil || len(resp.GetResults()) != 1 {
			b.Fatal(err, resp)
		}
		if _, err := st.Recv(); err == nil {
			b.Fatal("stream not closed")
		}
	}
	b.ReportMetric(float64(b.N*unaryItems)/time.Since(start).Seconds(), "items/s")
}

// BenchmarkStart20 measures starting and handshaking 20 plugin binaries
// concurrently: New on a directory of 20 binaries serving one plugin each,
// with automatic mTLS on (the default).
func BenchmarkStart20(b *testing.B) {
	dir := pluginDir(b)
	for i := range 20 {
		addScript(b, dir, fmt.Sprintf("p%02d", i), fmt.Sprintf("-names=example.com/p%02d", i))
	}
	benchStart(b, dir, 20)
}

// BenchmarkStart20Locked is BenchmarkStart20 with 20 real binaries (a
// full Go plugin each) pinned by a lock file: each is copied into a sealed
// memfd and hashed before it runs.
func BenchmarkStart20Locked(b *testing.B) {
	dir := pluginDir(b)
	for i := range 20 {
		data, err := os.ReadFile(filepath.Join(binDir, "testplugin"))
		require.NoError(b, err)
		require.NoError(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("p%02d", i)), data, 0o755))
	}
	_, err := WriteLock(dir, "")
	require.NoError(b, err)
	benchStart(b, dir, 20)
}

// benchStart times New on dir, which must load want plugins; closing the
// host is not timed. It also reports the CPU time of a start, the host's
// and the plugin processes' (user and system, counted once the host has
// closed them): the figure that does not depend on what else shares the
// cores.
func benchStart(b *testing.B, dir string, want int) {
	cpu := func() time.Duration {
		var self, children syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
		return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
	}
	var used time.Duration
	n := 0
	b.ResetTimer()
	for b.Loop() {
		before := cpu()
		h, err := New(&Config{Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		require.Len(b, h.Plugins(), want)
		require.NoError(b, h.Close())
		used += cpu() - before
		n++
		b.StartTimer()
	}
	b.ReportMetric(float64(used.Milliseconds())/float64(n), "cpu-ms/op")
}

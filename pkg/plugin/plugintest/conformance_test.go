package plugintest

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

// helperBinary returns this test binary, which serves plugins when
// PLUGINTEST_HELPER is set (see TestMain).
func helperBinary(t *testing.T) string {
	t.Helper()
	bin, err := os.Executable()
	require.NoError(t, err)
	return bin
}

func TestConformanceOnHelperBinary(t *testing.T) {
	var checked []string
	Conformance(t, helperBinary(t), &ConformanceOptions{
		Env:     []string{helperEnv + "=good"},
		Plugins: []string{"example.com/first", "example.com/second"},
		Items: []plugin.Item{
			// Only "second" admits this one; "first" gets it too (zero selector).
			ItemFromJSON(t, "volumesnapshots.snapshot.storage.k8s.io",
				`{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshot","metadata":{"name":"s","namespace":"prod","labels":{"app":"db","tier":"a"}}}`),
		},
		CheckResult: func(t testing.TB, name string, it plugin.Item, r plugin.Result) {
			checked = append(checked, name+" "+it.Name)
			require.Equal(t, plugin.OutcomeDone, r.Outcome)
		},
	})
	require.ElementsMatch(t, []string{"example.com/first s", "example.com/second s"}, checked)
}

func TestConformanceGoPluginAutoMTLS(t *testing.T) {
	Conformance(t, helperBinary(t), &ConformanceOptions{Env: []string{helperEnv + "=good"}, GoPluginAutoMTLS: true})
}

func TestStartAndRun(t *testing.T) {
	p := Start(t, helperBinary(t), helperEnv+"=good")
	require.Equal(t, plugin.ProtocolVersion, p.ProtocolVersion)
	got := p.Run(t, "example.com/first", plugin.Item{Resource: "pods", Namespace: "a", Name: "x"})
	require.Equal(t, plugin.OutcomeDone, got[0].Result.Outcome)
	require.NoError(t, p.Stop())
	require.NoError(t, p.Stop(), "Stop is idempotent")
}

func TestStopFindsLeftoverChildren(t *testing.T) {
	p := Start(t, helperBinary(t), helperEnv+"=leaves-child")
	err := p.Stop()
	require.ErrorContains(t, err, "outlived")
}

func TestStartRefusesNonPlugin(t *testing.T) {
	p, err := start(t, "/bin/true", nil, false)
	require.Error(t, err)
	require.NoError(t, p.Stop())
}

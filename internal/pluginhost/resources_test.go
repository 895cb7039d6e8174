package pluginhost

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/pkg/plugin"
)

// TestLethesOwnResourceIsNoUnresolvedName: a selector naming the native
// volume snapshots Lethe makes up is not warned about, while a name no
// discovery knows still is.
func TestLethesOwnResourceIsNoUnresolvedName(t *testing.T) {
	_, unresolved := ResolveSelector(plugin.ResourceSelector{IncludedResources: []string{
		"nativevolumesnapshots.lethe.io", "NativeVolumeSnapshots", "cm", "widgets.example.com",
	}})
	require.Equal(t, []string{"widgets.example.com"}, unresolved)
}

// TestCSISnapshotResourcesAreNoUnresolvedNames: the CSI snapshot API's
// resources (what the example snapshot-files plugin selects) resolve as
// discovery resolves them, so loading that plugin warns of nothing.
func TestCSISnapshotResourcesAreNoUnresolvedNames(t *testing.T) {
	resolved, unresolved := ResolveSelector(plugin.ResourceSelector{IncludedResources: []string{
		"volumesnapshotcontents.snapshot.storage.k8s.io", "vsc", "VolumeSnapshot", "volumesnapshotclasses",
	}})
	require.Empty(t, unresolved)
	require.Equal(t, []string{"volumesnapshotcontents.snapshot.storage.k8s.io", "volumesnapshotcontents.snapshot.storage.k8s.io",
		"volumesnapshots.snapshot.storage.k8s.io", "volumesnapshotclasses"}, resolved.IncludedResources)
}

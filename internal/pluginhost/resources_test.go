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

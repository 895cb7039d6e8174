package plugintest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/lethehq/lethe/pkg/plugin"
)

// ItemFromObject builds an Item from an unstructured Kubernetes object, as
// it would be read from a backup tarball. Group and Version come from
// apiVersion, Kind from kind, Namespace and Name from metadata, and Object
// is the object's JSON.
//
// resource is the plural resource name ("volumesnapshotcontents"), which
// cannot be derived from the kind. It may be group-qualified
// ("volumesnapshotcontents.snapshot.storage.k8s.io"); the group must then
// agree with apiVersion, or set it when the object has no apiVersion.
func ItemFromObject(t testing.TB, resource string, obj map[string]any) plugin.Item {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatalf("plugintest: encode object: %v", err)
	}
	it, err := itemFromJSON(resource, data)
	if err != nil {
		t.Fatalf("plugintest: %v", err)
	}
	return it
}

// ItemFromJSON is ItemFromObject for an object given as JSON.
func ItemFromJSON(t testing.TB, resource string, objectJSON string) plugin.Item {
	t.Helper()
	it, err := itemFromJSON(resource, []byte(objectJSON))
	if err != nil {
		t.Fatalf("plugintest: %v", err)
	}
	return it
}

func itemFromJSON(resource string, data []byte) (plugin.Item, error) {
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		return plugin.Item{}, fmt.Errorf("item object is not a JSON object: %w", err)
	}
	res, resGroup, qualified := strings.Cut(resource, ".")
	if res == "" {
		return plugin.Item{}, fmt.Errorf("item resource %q: want a plural resource name, e.g. pods or deployments.apps", resource)
	}
	group, version, ok := strings.Cut(obj.APIVersion, "/")
	if !ok { // "v1": the core group
		group, version = "", obj.APIVersion
	}
	if qualified {
		if obj.APIVersion != "" && group != resGroup {
			return plugin.Item{}, fmt.Errorf("item resource %q is in group %q, but the object's apiVersion %q is in group %q", resource, resGroup, obj.APIVersion, group)
		}
		group = resGroup
	}
	return plugin.Item{
		Group:     group,
		Version:   version,
		Resource:  res,
		Kind:      obj.Kind,
		Namespace: obj.Metadata.Namespace,
		Name:      obj.Metadata.Name,
		Object:    data,
	}, nil
}

// Labels returns the item's metadata.labels, which the host matches against
// a selector's LabelSelector. An item without labels, or whose Object is not
// a JSON object, has none.
func Labels(it plugin.Item) map[string]string {
	var obj struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if len(it.Object) == 0 || json.Unmarshal(it.Object, &obj) != nil {
		return nil
	}
	return obj.Metadata.Labels
}

// Command veleroplugin is a DeleteItemAction plugin built against Velero's
// own plugin framework, unmodified, the way a Velero user's plugin is. The
// compatibility tests of internal/pluginhost build it and run it under
// Lethe. It lives in a module of its own so that Velero's module never
// enters Lethe's go.mod.
//
// It serves two plugins:
//
//   - example.io/recorder selects every ConfigMap and Secret and appends one
//     line per Execute to the file $VELERO_RECORD_FILE: the plugin, the
//     item's kind, namespace/name, and the Backup's name, storage location,
//     the value of its label "app" and its spec.includedNamespaces (joined
//     by commas), tab-separated. An item named in
//     $VELERO_FAIL_ITEM gets an error instead.
//   - example.io/pvs selects persistentvolumes and records them the same way.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
)

func main() {
	framework.NewServer().
		RegisterDeleteItemAction("example.io/recorder", newRecorder(velero.ResourceSelector{
			IncludedResources: []string{"configmaps", "secrets"},
		})).
		RegisterDeleteItemAction("example.io/pvs", newRecorder(velero.ResourceSelector{
			IncludedResources: []string{"persistentvolumes"},
		})).
		Serve()
}

type recorder struct {
	name     string
	selector velero.ResourceSelector
	log      logrus.FieldLogger
}

func newRecorder(sel velero.ResourceSelector) func(logrus.FieldLogger) (any, error) {
	return func(log logrus.FieldLogger) (any, error) {
		return &recorder{selector: sel, log: log}, nil
	}
}

func (r *recorder) AppliesTo() (velero.ResourceSelector, error) { return r.selector, nil }

func (r *recorder) Execute(in *velero.DeleteItemActionExecuteInput) error {
	u, err := toUnstructured(in)
	if err != nil {
		return err
	}
	plugin := "example.io/recorder"
	if u.kind == "PersistentVolume" {
		plugin = "example.io/pvs"
	}
	if f := os.Getenv("VELERO_FAIL_ITEM"); f != "" && f == u.name {
		return fmt.Errorf("refusing to delete %s/%s on purpose", u.namespace, u.name)
	}
	line := strings.Join([]string{
		plugin, u.kind, u.namespace + "/" + u.name,
		in.Backup.Name, in.Backup.Spec.StorageLocation, in.Backup.Labels["app"],
		strings.Join(in.Backup.Spec.IncludedNamespaces, ","),
	}, "\t") + "\n"
	path := os.Getenv("VELERO_RECORD_FILE")
	if path == "" {
		return fmt.Errorf("VELERO_RECORD_FILE is not set")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	r.log.Infof("recorded %s %s/%s", u.kind, u.namespace, u.name)
	return f.Close()
}

type itemID struct{ kind, namespace, name string }

func toUnstructured(in *velero.DeleteItemActionExecuteInput) (itemID, error) {
	c := in.Item.UnstructuredContent()
	md, _ := c["metadata"].(map[string]any)
	if md == nil {
		return itemID{}, fmt.Errorf("item without metadata")
	}
	kind, _ := c["kind"].(string)
	ns, _ := md["namespace"].(string)
	name, _ := md["name"].(string)
	return itemID{kind: kind, namespace: ns, name: name}, nil
}

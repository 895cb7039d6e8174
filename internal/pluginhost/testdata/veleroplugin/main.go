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
//   - with $VELERO_SHORT_NAMES set, example.io/short selects "cm", "pv",
//     "deploy.apps" and "widgetz.example.io" (names Velero resolves
//     through discovery, and one no cluster has), and records as
//     example.io/recorder does, under its own name.
//
// When $VELERO_BACKUP_DUMP is set, each Execute also writes the Backup it
// received, re-encoded with Velero's own types, to that file.
//
// Run as `veleroplugin expect-deleting LOCATION < velero-backup.json`, it
// prints instead the Backup Velero 1.18's controllers would hand a
// DeleteItemAction for that file, with Velero's own code and types: the
// file decoded as persistence.GetBackupMetadata decodes it, changed as
// the backup sync controller changes it when it creates the Backup in the
// cluster (namespace, resourceVersion, storage location and its label),
// then patched to phase Deleting as the deletion controller does.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/label"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	"github.com/vmware-tanzu/velero/pkg/util"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "expect-deleting" {
		if err := expectDeleting(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	srv := framework.NewServer().
		RegisterDeleteItemAction("example.io/recorder", newRecorder(velero.ResourceSelector{
			IncludedResources: []string{"configmaps", "secrets"},
		})).
		RegisterDeleteItemAction("example.io/pvs", newRecorder(velero.ResourceSelector{
			IncludedResources: []string{"persistentvolumes"},
		}))
	if os.Getenv("VELERO_SHORT_NAMES") != "" {
		srv = srv.RegisterDeleteItemAction("example.io/short", newRecorder(velero.ResourceSelector{
			IncludedResources: []string{"cm", "pv", "deploy.apps", "widgetz.example.io"},
		}))
	}
	srv.Serve()
}

type recorder struct {
	name     string
	selector velero.ResourceSelector
	log      logrus.FieldLogger
	short    bool
}

func newRecorder(sel velero.ResourceSelector) func(logrus.FieldLogger) (any, error) {
	return func(log logrus.FieldLogger) (any, error) {
		return &recorder{selector: sel, log: log, short: slices.Contains(sel.IncludedResources, "cm")}, nil
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
	if r.short {
		plugin = "example.io/short"
	}
	if f := os.Getenv("VELERO_FAIL_ITEM"); f != "" && f == u.name {
		return fmt.Errorf("refusing to delete %s/%s on purpose", u.namespace, u.name)
	}
	line := strings.Join([]string{
		plugin, u.kind, u.namespace + "/" + u.name,
		in.Backup.Name, in.Backup.Spec.StorageLocation, in.Backup.Labels["app"],
		strings.Join(in.Backup.Spec.IncludedNamespaces, ","),
	}, "\t") + "\n"
	if dump := os.Getenv("VELERO_BACKUP_DUMP"); dump != "" {
		data, err := json.Marshal(in.Backup)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dump, data, 0o600); err != nil {
			return err
		}
	}
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

// expectDeleting prints the Backup Velero's controllers would send for
// the velero-backup.json on stdin (see the package comment).
func expectDeleting(location string) error {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	// pkg/persistence/object_store.go, GetBackupMetadata.
	obj, _, err := serializer.NewCodecFactory(util.VeleroScheme).UniversalDecoder(velerov1api.SchemeGroupVersion).Decode(data, nil, nil)
	if err != nil {
		return err
	}
	backup, ok := obj.(*velerov1api.Backup)
	if !ok {
		return fmt.Errorf("not a Backup: %T", obj)
	}
	// pkg/controller/backup_sync_controller.go, before Create.
	backup.Namespace = "velero"
	backup.ResourceVersion = ""
	backup.Spec.StorageLocation = location
	if backup.Labels == nil {
		backup.Labels = map[string]string{}
	}
	backup.Labels[velerov1api.StorageLocationLabel] = label.GetValidName(backup.Spec.StorageLocation)
	// pkg/controller/backup_deletion_controller.go, before the actions.
	backup.Status.Phase = velerov1api.BackupPhaseDeleting
	out, err := json.Marshal(backup)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}

// Command mksample writes the demo's sample backup: a Velero-layout tarball
// of a small application (pods, a deployment, volumes and their volume
// snapshots) and, for each volume snapshot, a file in a snapshot folder that
// stands for the cloud snapshot the snapshot-files plugin deletes.
//
//	go run ./internal/demo/mksample -out sample.tar.gz -snapshots ./snapshots
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lethehq/lethe/internal/archive/archivetest"
)

func main() {
	out := flag.String("out", "sample.tar.gz", "tarball to write")
	snaps := flag.String("snapshots", "snapshots", "folder of snapshot files to create")
	n := flag.Int("volumes", 3, "number of volumes, each with a snapshot")
	flag.Parse()
	if err := run(*out, *snaps, *n); err != nil {
		fmt.Fprintln(os.Stderr, "mksample:", err)
		os.Exit(1)
	}
}

func obj(apiVersion, kind, ns, name string, labels map[string]string, spec map[string]any) []byte {
	return objStatus(apiVersion, kind, ns, name, labels, spec, nil)
}

func objStatus(apiVersion, kind, ns, name string, labels map[string]string, spec, status map[string]any) []byte {
	md := map[string]any{"name": name}
	if ns != "" {
		md["namespace"] = ns
	}
	if len(labels) > 0 {
		md["labels"] = labels
	}
	o := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": md, "spec": spec}
	if status != nil {
		o["status"] = status
	}
	b, _ := json.Marshal(o)
	return b
}

func run(out, snaps string, volumes int) error {
	if err := os.MkdirAll(snaps, 0o750); err != nil {
		return err
	}
	app := map[string]string{"app": "shop"}
	items := []archivetest.ItemSpec{
		{Resource: "namespaces", Kind: "Namespace", Name: "shop", Object: obj("v1", "Namespace", "", "shop", nil, map[string]any{})},
		{Group: "apps", Resource: "deployments", Kind: "Deployment", Namespace: "shop", Name: "web", Labels: app,
			Object: obj("apps/v1", "Deployment", "shop", "web", app, map[string]any{"replicas": 2})},
		{Resource: "configmaps", Kind: "ConfigMap", Namespace: "shop", Name: "web-config", Labels: app,
			Object: obj("v1", "ConfigMap", "shop", "web-config", app, map[string]any{})},
	}
	for i := range 2 {
		name := fmt.Sprintf("web-%d", i)
		items = append(items, archivetest.ItemSpec{Resource: "pods", Kind: "Pod", Namespace: "shop", Name: name, Labels: app,
			Object: obj("v1", "Pod", "shop", name, app, map[string]any{"nodeName": "node-1"})})
	}
	for i := range volumes {
		pvc := fmt.Sprintf("data-%d", i)
		pv := fmt.Sprintf("pv-%04d", i)
		vsc := fmt.Sprintf("snapcontent-%04d", i)
		handle := fmt.Sprintf("snap-%04d.img", i)
		items = append(items,
			archivetest.ItemSpec{Resource: "persistentvolumeclaims", Kind: "PersistentVolumeClaim", Namespace: "shop", Name: pvc, Labels: app,
				Object: obj("v1", "PersistentVolumeClaim", "shop", pvc, app, map[string]any{"volumeName": pv})},
			archivetest.ItemSpec{Resource: "persistentvolumes", Kind: "PersistentVolume", Name: pv,
				Object: obj("v1", "PersistentVolume", "", pv, nil, map[string]any{"capacity": map[string]string{"storage": "10Gi"}})},
			archivetest.ItemSpec{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshotcontents", Kind: "VolumeSnapshotContent", Name: vsc,
				Object: objStatus("snapshot.storage.k8s.io/v1", "VolumeSnapshotContent", "", vsc, nil,
					map[string]any{"deletionPolicy": "Retain", "volumeSnapshotRef": map[string]string{"namespace": "shop", "name": pvc}},
					map[string]any{"snapshotHandle": handle, "readyToUse": true})},
		)
		if err := os.WriteFile(filepath.Join(snaps, handle), []byte("snapshot of "+pv+"\n"), 0o640); err != nil {
			return err
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := archivetest.Write(f, items, archivetest.Options{PreferredVersionCopies: true}); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%d items) and %d snapshot files in %s\n", out, len(items), volumes, snaps)
	return nil
}

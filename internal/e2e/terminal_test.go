package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/internal/termtext/termtexttest"
)

// requireTerminalSafe checks that r's stdout and stderr would not drive a
// terminal: no raw control byte (other than the newline), no bidi
// control, no byte that is not UTF-8, and no line that a hostile line
// feed started.
func requireTerminalSafe(t *testing.T, r result) {
	t.Helper()
	for _, s := range []struct{ name, text string }{{"stdout", r.stdout}, {"stderr", r.stderr}} {
		if i := termtexttest.RawControl(s.text); i >= 0 {
			t.Fatalf("lethe %q: raw control on %s at byte %d: %q", r.args, s.name, i, s.text[max(0, i-40):min(len(s.text), i+40)])
		}
		for line := range strings.SplitSeq(s.text, "\n") {
			require.False(t, strings.HasPrefix(strings.TrimSpace(line), termtexttest.ForgedLine),
				"lethe %q: a hostile line feed started a line of its own on %s:\n%s", r.args, s.name, s.text)
		}
	}
}

// hostileLabel is a label value that makes a hyperlink.
const hostileLabel = "a\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07"

// TestHostileNamesNeverReachTheTerminalRaw runs a corpus of hostile names
// (ESC sequences, CR, LF, OSC 8 and OSC 52, BEL, U+202E, bytes that are
// not UTF-8, NUL, DEL, C1 CSI) through the text output of every command,
// by the three ways they can come: in a tarball (refused at create and
// sync), in forged catalog rows (as anyone who can write the catalog can
// forge them), and on the command line. No raw control byte may reach
// stdout or stderr, and the names show Go-quoted.
func TestHostileNamesNeverReachTheTerminalRaw(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.create("b1", 3)
	hostile := termtexttest.Hostile

	t.Run("tarball", func(t *testing.T) {
		for i, h := range hostile {
			if strings.ContainsRune(h, 0) {
				continue // a tar header cannot hold NUL
			}
			entry := "resources/pods/namespaces/default/" + h + ".json"
			body, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]string{"name": h, "namespace": "default"}})
			require.NoError(t, err)
			p := filepath.Join(e.dir, fmt.Sprintf("hostile-%d.tar.gz", i))
			f, err := os.Create(p)
			require.NoError(t, err)
			require.NoError(t, archivetest.WriteEntries(f, []archivetest.Entry{
				{Name: "metadata/version", Body: []byte("1.1.0\n")},
				{Name: "resources/pods/namespaces/default/web-0.json", Body: []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"default"}}`)},
				{Name: entry, Body: body},
			}, archivetest.Gzip))
			require.NoError(t, f.Close())
			r := e.run("backup", "create", fmt.Sprintf("hostile-%d", i), "--from", p)
			requireOneErrorLine(t, r, "backup tarball rejected: entry "+strconv.Quote(entry))
			if !strings.Contains(h, "/") { // else the path is refused first
				require.Contains(t, r.stderr, "which no Kubernetes name can", "%s", r)
			}
			requireTerminalSafe(t, r)
		}
		// Sync: a hostile tarball in storage, and a folder whose name is
		// hostile, are both reported rejected, quoted.
		bad := filepath.Join(e.storageDir(), "backups", "s1")
		require.NoError(t, os.MkdirAll(bad, 0o750))
		copyFile(t, filepath.Join(e.dir, "hostile-0.tar.gz"), filepath.Join(bad, "s1.tar.gz"), 0o640)
		evil := "evil\x1b[31m\x1b]52;c;ZXZpbA==\x07"
		require.NoError(t, os.MkdirAll(filepath.Join(e.storageDir(), "backups", evil), 0o750))
		copyFile(t, e.writeTarball("evil", 2), filepath.Join(e.storageDir(), "backups", evil, evil+".tar.gz"), 0o640)
		r := e.ok("backup", "sync", "--dry-run")
		requireTerminalSafe(t, r)
		require.Contains(t, r.stdout, strconv.Quote(evil), "%s", r)
		require.Contains(t, r.stdout, "which no Kubernetes name can", "%s", r)
		r = e.ok("backup", "sync", "--dry-run", "-o", "yaml")
		requireTerminalSafe(t, r)
		require.NoError(t, os.RemoveAll(filepath.Join(e.storageDir(), "backups", evil)))
		require.NoError(t, os.RemoveAll(bad))
	})

	// Forged rows: written with the catalog library straight into the
	// SQLite file, which checks no names.
	forgedBackup := "evil\x1b[2J\x1b[31mbackup"
	var volumes []catalog.Key
	var retryIDs []int64
	st := e.openCatalog()
	b1, err := st.Get(ctx, catalog.Key{Kind: "Backup", Name: "b1"})
	require.NoError(t, err)
	// One backup whose name no command accepts (listings show it), and
	// one with a plain name and hostile labels, conditions and Velero
	// fields (backup get shows them).
	fb := *b1
	fb.UID, fb.Name = "", forgedBackup
	created, err := st.Create(ctx, &fb)
	require.NoError(t, err)
	fb2 := *b1
	fb2.UID, fb2.Name = "", "forged"
	fb2.Labels = map[string]string{"team": hostileLabel}
	fb2.Finalizers = []string{"example.com/\x1b[8m"}
	fb2.Conditions = []catalog.Condition{{Type: "TarballMissing", Status: "True", Reason: "x\u202eY", Message: "m\n" + termtexttest.ForgedLine, LastTransitionTime: time.Now()}}
	bk, err := backup.FromResource(&fb2)
	require.NoError(t, err)
	bk.Spec.Velero = &backup.VeleroInfo{MetadataKey: "backups/forged/\x9b2J", StorageLocation: "de\u202efault", Phase: "Completed\r\x1b[2K", IncludedNamespaces: []string{"shop", "\x1b]52;c;ZXZpbA==\x07"}}
	require.NoError(t, bk.Encode())
	_, err = st.Create(ctx, bk.Resource)
	require.NoError(t, err)
	for i, h := range hostile {
		k := catalog.Key{Kind: "Volume", Namespace: "ns", Name: h}
		if i%3 == 0 {
			k.Namespace = h // a hostile namespace too
		}
		_, err := st.Create(ctx, &catalog.Resource{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name,
			Labels: map[string]string{"app": "v"}, Annotations: map[string]string{"note": h},
			Finalizers: []string{"example.com/" + h},
			Conditions: []catalog.Condition{{Type: "Ready", Status: "False", Reason: h, Message: h, LastTransitionTime: time.Now()}}})
		require.NoError(t, err, "%q", h)
		volumes = append(volumes, k)
		require.NoError(t, st.AppendAudit(ctx, catalog.AuditEntry{Time: time.Now(), Actor: "cli:" + h, Action: "create",
			Kind: "Volume", Namespace: k.Namespace, Name: h, UID: "u", Reason: h}))
		rows, err := st.RecordRetries(ctx, []catalog.RetryRecord{{
			RetryIdentity: catalog.RetryIdentity{Kind: "BackupItem", Key: "Backup/" + forgedBackup, ItemID: fmt.Sprintf("%d:pods/ns/%s", i, h), Plugin: "example.com/" + h},
			OwnerUID:      created.UID,
			Attempt:       catalog.RetryAttempt{Time: time.Now(), Outcome: "failed", Message: h},
		}}, func(*catalog.RetryRow) catalog.RetryPlan {
			return catalog.RetryPlan{State: catalog.RetryDiscarded, NextAttemptAt: time.Now().Add(time.Hour)}
		})
		require.NoError(t, err)
		retryIDs = append(retryIDs, rows[0].ID)
	}
	require.NoError(t, st.Close())

	t.Run("forged catalog rows", func(t *testing.T) {
		// Every listing, in every format.
		for _, args := range [][]string{
			{"backup", "list"}, {"get", "backups"}, {"get", "Volume"}, {"audit"}, {"retry", "list"},
		} {
			for _, o := range []string{"table", "json", "yaml"} {
				r := e.ok(append(args, "-o", o)...)
				requireTerminalSafe(t, r)
			}
		}
		r := e.ok("backup", "list")
		require.Contains(t, r.stdout, strconv.Quote(forgedBackup), "%s", r)

		// The forged backups, shown, planned and explained.
		r = e.ok("backup", "get", "forged")
		requireTerminalSafe(t, r)
		require.Contains(t, r.stdout, "Labels:     "+strconv.Quote("team="+hostileLabel)+"\n", "%s", r)
		for _, args := range [][]string{
			{"backup", "get", "forged", "-o", "yaml"},
			{"backup", "get", "forged", "-o", "json"},
			{"backup", "delete", "forged", "--dry-run"},
			{"backup", "delete", "--all", "--dry-run"},
			{"backup", "delete", "--all", "--dry-run", "-o", "yaml"},
			{"describe", "backup", "forged"},
			{"explain", "backup", "forged"},
			{"audit", "--name", "forged"},
			{"get", "Backup", forgedBackup},
			{"describe", "Backup", forgedBackup},
			{"explain", "Backup", forgedBackup},
		} {
			requireTerminalSafe(t, e.run(args...))
		}
		r = e.ok("backup", "delete", "--all", "--dry-run")
		require.Contains(t, r.stdout, "Plan for deleting backup "+strconv.Quote(forgedBackup), "%s", r)

		// -o json escapes what encoding/json leaves raw, and still says
		// exactly what the row holds.
		r = e.ok("get", "Volume", "-o", "json")
		names := map[string]bool{}
		for _, it := range listItems(t, r.stdout, "Volume") {
			var g struct{ Metadata struct{ Name string } }
			require.NoError(t, json.Unmarshal(it, &g), "%s", r)
			names[g.Metadata.Name] = true
		}
		for _, h := range hostile {
			if utf8.ValidString(h) {
				require.True(t, names[h], "-o json lost %q", h)
			}
		}

		// Each forged resource through the commands that name one.
		for i, k := range volumes {
			for _, args := range [][]string{
				{"get", "Volume", k.Name, "-n", k.Namespace},
				{"describe", "Volume", k.Name, "-n", k.Namespace},
				{"explain", "Volume", k.Name, "-n", k.Namespace},
				{"delete", "Volume", k.Name, "-n", k.Namespace, "--dry-run"},
				{"finalize", "Volume", k.Name, "-n", k.Namespace, "example.com/" + k.Name},
				{"retry", "get", strconv.FormatInt(retryIDs[i], 10)},
			} {
				if strings.ContainsRune(strings.Join(args, ""), 0) {
					continue // an argument cannot hold NUL; the listings above show it
				}
				requireTerminalSafe(t, e.run(args...))
			}
		}
		// A name no resource can have is refused on the command line (exit
		// 2, as for every kind), named quoted; the listings show the rows.
		r = e.run("describe", "Volume", hostile[0], "-n", volumes[0].Namespace)
		require.Equal(t, 2, r.code, "%s", r)
		require.Contains(t, r.stderr, "invalid name "+strconv.Quote(hostile[0]), "%s", r)
		r = e.ok("get", "Volume")
		require.Contains(t, r.stdout, strconv.Quote(hostile[0]), "%s", r)
		r = e.ok("retry", "get", strconv.FormatInt(retryIDs[0], 10))
		require.Contains(t, r.stdout, "Owner:        "+strconv.Quote("Backup/"+forgedBackup), "%s", r)
		r = e.run("explain", "Volume", hostile[0], "-n", volumes[0].Namespace)
		require.Equal(t, 2, r.code, "%s", r)
		require.Contains(t, r.stderr, strconv.Quote(hostile[0]), "%s", r)
	})

	t.Run("command line", func(t *testing.T) {
		manifest := filepath.Join(e.dir, "m.yaml")
		for _, h := range hostile {
			if strings.ContainsRune(h, 0) {
				continue // an argument cannot hold NUL
			}
			require.NoError(t, os.WriteFile(manifest, []byte("kind: Volume\nmetadata:\n  name: "+strconv.Quote(h)+"\n  namespace: ns\n"), 0o600))
			for _, args := range [][]string{
				{"backup", "get", h}, {"backup", "describe", h}, {"backup", "delete", h, "--dry-run"}, {"backup", "undelete", h},
				{"get", h}, {"get", "Volume", h}, {"get", "backup", h}, {"describe", "Volume", h}, {"describe", h, "x"},
				{"explain", "Volume", h}, {"explain", h, "x", "-n", h}, {"delete", "Volume", h, "--dry-run"}, {"delete", h, "x", "--yes"},
				{"finalize", "Volume", "x", h}, {"finalize", h, "x", "y"},
				{"audit", "--name", h}, {"audit", "--kind", h}, {"audit", "--since", h},
				{"retry", "get", h}, {"retry", "list", "--state", h},
				{"apply", "-f", manifest}, {"apply", "-f", manifest + h},
				{"backup", "list", "-o", h}, {"backup", "list", "-l", h}, {"backup", "create", h, "--from", manifest + h},
				{h}, {"backup", "--" + h},
			} {
				r := e.run(args...)
				requireTerminalSafe(t, r)
			}
		}
		// The echo of a typed name is the quoted name.
		h := hostile[0]
		r := e.run("explain", "Volume", h)
		requireOneErrorLine(t, r, "Error: invalid name "+strconv.Quote(h)+": ")
		// A forged row's name is refused on the command line (invalid name,
		// exit 2), so the typed finalizer is echoed on a resource of a
		// valid name.
		r = e.run("finalize", "Volume", volumes[1].Name, "-n", volumes[1].Namespace, "example.com/"+h)
		requireOneErrorLine(t, r, "invalid name "+termtext.Quote(volumes[1].Name))
		e.ok("apply", "-f", e.writeFile("plain.yaml", "kind: Volume\nmetadata: {name: plain, namespace: ns}\n"))
		r = e.run("finalize", "Volume", "plain", "-n", "ns", "example.com/"+h)
		requireOneErrorLine(t, r, "Volume/ns/plain is Active")
		requireTerminalSafe(t, r)
	})
}

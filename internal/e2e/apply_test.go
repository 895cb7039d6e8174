package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// applyReport is apply -o json: an ApplyReport (docs/output.md).
type applyReport struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	DryRun     bool   `json:"dryRun"`
	Changes    []struct {
		Resource struct {
			Kind      string `json:"kind"`
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
			UID       string `json:"uid"`
		} `json:"resource"`
		Action string     `json:"action"`
		Phase  string     `json:"phase"`
		DueAt  *time.Time `json:"dueAt"`
		Reason string     `json:"reason"`
	} `json:"changes"`
}

func (e *env) applyJSON(wantCode int, args ...string) applyReport {
	e.t.Helper()
	r := e.run(append([]string{"apply", "-o", "json"}, args...)...)
	require.Equal(e.t, wantCode, r.code, "%s", r)
	var rep applyReport
	require.NoError(e.t, json.Unmarshal([]byte(r.stdout), &rep), "%s", r)
	require.Equal(e.t, "lethe.io/v1", rep.APIVersion, "%s", r)
	require.Equal(e.t, "ApplyReport", rep.Kind, "%s", r)
	return rep
}

func (rep applyReport) actions() map[string]string {
	out := map[string]string{}
	for _, c := range rep.Changes {
		out[c.Resource.Name] = c.Action
	}
	return out
}

func (e *env) writeFile(name, text string) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	require.NoError(e.t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

// resourceJSON is the part of get KIND NAME -o json the tests read.
type resourceJSON struct {
	UID         string
	Phase       string
	Annotations map[string]string
	Spec        json.RawMessage
}

func (r *resourceJSON) UnmarshalJSON(data []byte) error {
	var o struct {
		Metadata struct {
			UID         string            `json:"uid"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec      json.RawMessage `json:"spec"`
		Lifecycle struct {
			Phase string `json:"phase"`
		} `json:"lifecycle"`
	}
	if err := json.Unmarshal(data, &o); err != nil {
		return err
	}
	*r = resourceJSON{UID: o.Metadata.UID, Phase: o.Lifecycle.Phase, Annotations: o.Metadata.Annotations, Spec: o.Spec}
	return nil
}

func (e *env) getResource(kind, ns, name string) (resourceJSON, int) {
	e.t.Helper()
	r := e.run("get", kind, name, "-n", ns, "-o", "json")
	var out resourceJSON
	if r.code == 0 {
		require.NoError(e.t, json.Unmarshal([]byte(r.stdout), &out), "%s", r)
	}
	return out, r.code
}

// shopBundle is a bundle of Services in namespace shop; a member named
// NAME=DELAY carries lethe.io/deletion-delay: DELAY.
func shopBundle(version string, members ...string) string {
	var b strings.Builder
	b.WriteString("kind: Bundle\nmetadata: {name: shop}\nspec:\n  resources:")
	if len(members) == 0 {
		b.WriteString(" []")
	}
	b.WriteString("\n")
	for _, m := range members {
		name, delay, _ := strings.Cut(m, "=")
		ann := ""
		if delay != "" {
			ann = ", annotations: {lethe.io/deletion-delay: " + delay + "}"
		}
		b.WriteString("  - name: " + name + "\n    object: {kind: Service, metadata: {namespace: shop" + ann + "}, spec: {version: " + version + "}}\n")
	}
	return b.String()
}

// TestApplyBundleAcrossRestarts: every step is its own lethe process. A
// pruned member's countdown survives a SIGKILL of the server; one that
// comes back in a later process is adopted (Active, annotation gone, no
// longer due, new spec), and the server then leaves it alone while it
// deletes the one that was not adopted.
func TestApplyBundleAcrossRestarts(t *testing.T) {
	e := newEnv(t)
	full := e.writeFile("shop.yaml", shopBundle("1", "keep=1h", "short=3s", "plain"))
	rep := e.applyJSON(0, "-f", full)
	assert.Equal(t, map[string]string{"shop": "created", "keep": "created", "short": "created", "plain": "created"}, rep.actions())

	// Prune all three: the two with a delay count down, plain goes to
	// Deleting at once (the collector's job from there).
	pruned := e.writeFile("pruned.yaml", shopBundle("1"))
	dry := e.applyJSON(0, "-f", pruned, "--dry-run")
	require.True(t, dry.DryRun)
	before, _ := e.getResource("Service", "shop", "keep")
	require.Equal(t, "Active", before.Phase, "the dry run changed nothing")
	rep = e.applyJSON(0, "-f", pruned)
	assert.Equal(t, dry.actions(), rep.actions())
	assert.Equal(t, map[string]string{"shop": "updated", "keep": "scheduled", "short": "scheduled", "plain": "deleted"}, rep.actions())
	for _, c := range rep.Changes {
		if c.Action == "scheduled" {
			require.NotNil(t, c.DueAt, c.Resource.Name)
		}
	}
	keep, _ := e.getResource("Service", "shop", "keep")
	require.Equal(t, "Scheduled", keep.Phase)
	require.Contains(t, keep.Annotations, "lethe.io/deletion-scheduled-at")
	plain, _ := e.getResource("Service", "shop", "plain")
	require.Equal(t, "Deleting", plain.Phase)

	// A server starts counting down, and is killed mid-countdown.
	srv := e.start("server", "--no-plugins", "--metrics-addr", freePort(t))
	time.Sleep(500 * time.Millisecond) // let it reach its timers; nothing is asserted on time
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGKILL))
	srv.wait(t)
	require.True(t, srv.killedBySIGKILL())

	// keep comes back, in a new process, with a new spec: adopted.
	back := e.writeFile("back.yaml", shopBundle("2", "keep=1h"))
	rep = e.applyJSON(0, "-f", back)
	assert.Equal(t, "adopted", rep.actions()["keep"])
	keep, _ = e.getResource("Service", "shop", "keep")
	assert.Equal(t, "Active", keep.Phase)
	assert.NotContains(t, keep.Annotations, "lethe.io/deletion-scheduled-at")
	assert.JSONEq(t, `{"version":2}`, string(keep.Spec))

	// A new server deletes short when its window ends (the countdown
	// survived the kill), its collector purges short and plain (pruned
	// without a delay, handed to the collector by apply), and it leaves
	// keep alone.
	plainUID := plain.UID
	srv = e.start("server", "--no-plugins", "--log-level", "debug", "--metrics-addr", freePort(t))
	deadline := time.Now().Add(60 * time.Second)
	for {
		short, sc := e.getResource("Service", "shop", "short")
		plain, pc := e.getResource("Service", "shop", "plain")
		require.Contains(t, []int{0, 4}, sc)
		require.Contains(t, []int{0, 4}, pc)
		if sc == 4 && pc == 4 {
			break // both purged
		}
		require.Contains(t, []string{"Scheduled", "Deleting", ""}, short.Phase)
		require.Contains(t, []string{"Deleting", ""}, plain.Phase)
		if srv.exited() {
			t.Fatalf("server exited: %s", srv.wait(t))
		}
		if time.Now().After(deadline) {
			_ = srv.cmd.Process.Signal(syscall.SIGTERM)
			t.Fatalf("short (%s) or plain (%s) never purged; %s", short.Phase, plain.Phase, srv.wait(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGTERM))
	r := srv.wait(t)
	require.Equal(t, 0, r.code, "%s", r)
	keep, _ = e.getResource("Service", "shop", "keep")
	assert.Equal(t, "Active", keep.Phase)

	// Purged members that come back are simply created again, with a new
	// uid. (The sync filter on Scheduled and Deleting members is tested in
	// internal/apply.)
	rep = e.applyJSON(0, "-f", full)
	assert.Equal(t, "created", rep.actions()["short"])
	assert.Equal(t, "created", rep.actions()["plain"])
	plain, _ = e.getResource("Service", "shop", "plain")
	assert.Equal(t, "Active", plain.Phase)
	assert.NotEqual(t, plainUID, plain.UID)
}

// TestApplyRefusesBadManifests: each bad manifest is one error line
// naming the document and the field, exit 1, and nothing is applied (the
// good document before it included).
func TestApplyRefusesBadManifests(t *testing.T) {
	e := newEnv(t)
	good := "kind: Database\nmetadata: {name: orders, namespace: prod}\n---\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"name", "kind: Volume\nmetadata: {name: Vol_1}", `document 2 (Volume/Vol_1): metadata.name: invalid name "Vol_1"`},
		{"label", "kind: Volume\nmetadata: {name: v, labels: {team: 'a b'}}", `document 2 (Volume/v): metadata.labels["team"]: invalid label value`},
		{"policy", "kind: Volume\nmetadata: {name: v}\nreferences: [{kind: Disk, name: d, onTargetDelete: keep}]", `document 2 (Volume/v): references[0].onTargetDelete: invalid policy "keep"`},
		{"owner", "kind: Volume\nmetadata: {name: v, namespace: prod, ownerReferences: [{kind: Disk, name: d}]}", `document 2 (Volume/prod/v): metadata.ownerReferences[0]: owner Disk/prod/d or Disk/d does not exist`},
		{"target", "kind: Volume\nmetadata: {name: v}\nreferences: [{kind: Disk, name: d, onTargetDelete: block}]", `document 2 (Volume/v): references[0]: block target Disk/d does not exist`},
		{"cycle", "kind: A\nmetadata: {name: a, ownerReferences: [{kind: B, name: b}]}\n---\nkind: B\nmetadata: {name: b, ownerReferences: [{kind: A, name: a}]}", `cycle: A/a owns B/b; B/b owns A/a: none of them could ever be purged`},
		{"bundle twice", shopBundle("1", "web", "web"), `spec.resources[1].name: member "web" appears twice`},
		{"bundle delay", shopBundle("1", "web=soon"), `spec.resources[0].object.metadata.annotations["lethe.io/deletion-delay"]: invalid duration "soon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := e.writeFile(tc.name+".yaml", good+tc.doc)
			r := e.run("apply", "-f", f)
			require.Equal(t, 1, r.code, "%s", r)
			requireOneErrorLine(t, r, tc.want)
			require.Contains(t, r.stderr, f+", document")
			_, code := e.getResource("Database", "prod", "orders")
			require.Equal(t, 4, code, "nothing applied")
		})
	}
	// A member another bundle owns is refused, naming the owner.
	e.ok("apply", "-f", e.writeFile("shop.yaml", shopBundle("1", "web")))
	other := strings.Replace(shopBundle("1", "web"), "name: shop}", "name: other}", 1)
	r := e.run("apply", "-f", e.writeFile("other.yaml", other))
	requireOneErrorLine(t, r, "Service/shop/web already belongs to Bundle/shop")
	_, code := e.getResource("Bundle", "", "other")
	require.Equal(t, 4, code)
}

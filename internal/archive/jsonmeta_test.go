package archive

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseMeta(t *testing.T) {
	m, err := parseMeta([]byte(` {"kind":"Pod","spec":{"a":[1,-2.5e+3,true,false,null,"x\"y"]},"apiVersion":"v1",`+
		`"metadata":{"labels":{"app":"web","t\u0069er":"db\n"},"name":"web-0","namespace":"default"}} `), true)
	require.NoError(t, err)
	require.Equal(t, "v1", string(m.apiVersion))
	require.Equal(t, "Pod", string(m.kind))
	require.Equal(t, "web-0", string(m.name))
	require.Equal(t, "default", string(m.namespace))
	require.Equal(t, map[string]string{"app": "web", "tier": "db\n"}, m.labels)

	for _, bad := range []string{
		``, `{`, `{"a":}`, `{"a":1,}`, `{"a" 1}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":tru}`,
		`{"a":"\x"}`, "{\"a\":\"\x01\"}", `{"a":"\u12"}`, `{} {}`, `[]`, `"x"`, `{"kind":1}`,
		`{"metadata":[]}`, `{"metadata":{"labels":{"a":1}}}`, `{"kind":"a","kind":"b"}`,
	} {
		_, err := parseMeta([]byte(bad), true)
		require.Error(t, err, "%q", bad)
	}
}

// FuzzParseMeta checks parseMeta against encoding/json: it never accepts
// invalid JSON, rejects valid JSON only for a shape reason, and extracts
// what encoding/json decodes.
func FuzzParseMeta(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a","namespace":"b","labels":{"x":"y"}}}`))
	f.Add([]byte(`{"a":[1,2,{"b":null}],"c":"\u00e9\ud83d\ude00"}`))
	f.Add([]byte(`{"apiVersion":"v1","metadata":{"name":"x\"y"}} `))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMeta(b, true)
		valid := json.Valid(b)
		if err == nil && !valid {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		var je *jsonError
		if err != nil && valid && errors.As(err, &je) && !strings.Contains(je.msg, "duplicate key") {
			t.Fatalf("rejected valid JSON %q: %v", b, err)
		}
		if err != nil {
			return
		}
		var ref struct {
			APIVersion *string `json:"apiVersion"`
			Kind       *string `json:"kind"`
			Metadata   *struct {
				Name      *string           `json:"name"`
				Namespace *string           `json:"namespace"`
				Labels    map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if json.Unmarshal(b, &ref) != nil || hasCaseVariant(b) {
			return // encoding/json matches keys case-insensitively; compare plain cases only
		}
		if ref.APIVersion != nil && *ref.APIVersion != string(m.apiVersion) ||
			ref.Kind != nil && *ref.Kind != string(m.kind) {
			t.Fatalf("%q: got apiVersion %q kind %q", b, m.apiVersion, m.kind)
		}
		if ref.Metadata != nil {
			if ref.Metadata.Name != nil && *ref.Metadata.Name != string(m.name) ||
				ref.Metadata.Namespace != nil && *ref.Metadata.Namespace != string(m.namespace) {
				t.Fatalf("%q: got name %q namespace %q", b, m.name, m.namespace)
			}
			if len(ref.Metadata.Labels) != len(m.labels) {
				t.Fatalf("%q: got labels %v, want %v", b, m.labels, ref.Metadata.Labels)
			}
			for k, v := range ref.Metadata.Labels {
				if m.labels[k] != v {
					t.Fatalf("%q: got labels %v, want %v", b, m.labels, ref.Metadata.Labels)
				}
			}
		}
	})
}

// hasCaseVariant reports whether b may hold a key that differs from one we
// extract only by case, where encoding/json and parseMeta rightly differ.
func hasCaseVariant(b []byte) bool {
	s, lower := string(b), strings.ToLower(string(b))
	for _, k := range []string{"apiVersion", "kind", "metadata", "name", "namespace", "labels"} {
		if strings.Count(lower, strings.ToLower(k)) != strings.Count(s, k) {
			return true
		}
	}
	return false
}

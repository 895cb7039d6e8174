package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/util/jsonpath"
)

// APIVersion is the apiVersion of every object Lethe prints with -o
// json|yaml, and the one apply accepts (docs/output.md).
const APIVersion = "lethe.io/v1"

// Output formats. jsonpath is "jsonpath=TEMPLATE".
const (
	outTable = "table"
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
	outName  = "name"
)

// outputFlag adds -o/--output to a command that prints things.
func outputFlag(c *cobra.Command, def string) *string {
	o := new(string)
	c.Flags().StringVarP(o, "output", "o", def, "output format: table, wide, json, yaml, name or jsonpath=TEMPLATE (docs/output.md)")
	return o
}

// checkOutput refuses an unknown format, and a jsonpath template that
// does not parse, before anything runs.
func checkOutput(o string) error {
	switch o {
	case outTable, outWide, outJSON, outYAML, outName:
		return nil
	}
	if tmpl, ok := strings.CutPrefix(o, "jsonpath="); ok {
		if _, err := parseJSONPath(tmpl); err != nil {
			return usageError{fmt.Errorf("--output jsonpath: %v", err)}
		}
		return nil
	}
	return usageError{fmt.Errorf("--output %q: use table, wide, json, yaml, name or jsonpath=TEMPLATE", o)}
}

// structured reports whether o prints objects (json, yaml, name,
// jsonpath) rather than a table.
func structured(o string) bool { return o != outTable && o != outWide }

func parseJSONPath(tmpl string) (*jsonpath.JSONPath, error) {
	if strings.TrimSpace(tmpl) == "" {
		return nil, errors.New("empty template")
	}
	jp := jsonpath.New("output")
	if err := jp.Parse(tmpl); err != nil {
		return nil, err
	}
	return jp, nil
}

// object is one value as -o json|yaml prints it: its JSON with apiVersion
// and kind first. It is what printObject and printList take.
type object []byte

func (o object) MarshalJSON() ([]byte, error) { return o, nil }

// toObject is v's JSON (an object) with apiVersion lethe.io/v1 and kind
// first. v must not carry an apiVersion but lethe.io/v1, nor a kind other than kind: a
// field named kind that says something else (a row type, the kind of the
// resource a row is about) belongs under another name.
func toObject(kind string, v any) (object, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	fields, err := objectFields(b)
	if err != nil {
		return nil, fmt.Errorf("printing a %s: %w", kind, err)
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, `{"apiVersion":%q,"kind":%q`, APIVersion, kind)
	for _, f := range fields {
		switch f.key {
		case "apiVersion":
			var av string
			if json.Unmarshal(f.value, &av) != nil || av != APIVersion {
				return nil, fmt.Errorf("printing a %s: the view's apiVersion says %s", kind, f.value)
			}
			continue
		case "kind":
			var k string
			if json.Unmarshal(f.value, &k) != nil || k != kind {
				return nil, fmt.Errorf("printing a %s: the view's kind field says %s", kind, f.value)
			}
			continue
		}
		key, _ := json.Marshal(f.key)
		fmt.Fprintf(&out, ",%s:%s", key, f.value)
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

type field struct {
	key   string
	value json.RawMessage
}

// objectFields splits a JSON object into its fields, in order.
func objectFields(b []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var out []field
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		out = append(out, field{key: t.(string), value: raw})
	}
	return out, nil
}

// toObjects is toObject of each element of the slice items.
func toObjects(kind string, items any) ([]object, error) {
	rv := reflect.ValueOf(items)
	if rv.Kind() != reflect.Slice {
		return nil, fmt.Errorf("printing a %sList: not a slice", kind)
	}
	out := make([]object, 0, rv.Len())
	for i := range rv.Len() {
		o, err := toObject(kind, rv.Index(i).Interface())
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// objectList is a list: kind <Kind>List, its items each with apiVersion and
// kind.
type objectList struct {
	Items []object `json:"items"`
}

// printObject prints v as an object of kind kind in format (json, yaml,
// name or jsonpath=…).
func printObject(w io.Writer, format, kind string, v any) error {
	o, err := toObject(kind, v)
	if err != nil {
		return err
	}
	return printFormatted(w, format, o)
}

// printList prints items (a slice) as a <kind>List whose items are each
// of kind kind.
func printList(w io.Writer, format, kind string, items any) error {
	objs, err := toObjects(kind, items)
	if err != nil {
		return err
	}
	return printObject(w, format, kind+"List", objectList{Items: objs})
}

// printFormatted writes an object (already with apiVersion and kind) in
// format.
func printFormatted(w io.Writer, format string, o object) error {
	switch {
	case format == outJSON || format == outYAML:
		return printStructured(w, format, o)
	case format == outName:
		return printNames(w, o)
	case strings.HasPrefix(format, "jsonpath="):
		return printJSONPath(w, strings.TrimPrefix(format, "jsonpath="), o)
	}
	return fmt.Errorf("--output %q: not a structured format", format)
}

// printNames writes kind/name for the object, or for each item of a
// list, as kubectl's -o name does: the kind in lower case.
func printNames(w io.Writer, o object) error {
	var v struct {
		Kind     string          `json:"kind"`
		Name     string          `json:"name"`
		ID       json.RawMessage `json:"id"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(o, &v); err != nil {
		return err
	}
	if strings.HasSuffix(v.Kind, "List") && v.Items != nil {
		for _, it := range v.Items {
			if err := printNames(w, object(it)); err != nil {
				return err
			}
		}
		return nil
	}
	name := v.Metadata.Name
	if name == "" {
		name = v.Name
	}
	if name == "" && v.ID != nil {
		name = string(v.ID) // a retry row is named by its id
	}
	if name == "" {
		return exitCodeError{code: 2, err: fmt.Errorf("-o name: a %s has no name; use -o json or -o yaml", v.Kind)}
	}
	_, err := fmt.Fprintf(w, "%s\n", escapeJSON([]byte(strings.ToLower(v.Kind)+"/"+name)))
	return err
}

// printJSONPath runs a kubectl jsonpath template over the object.
func printJSONPath(w io.Writer, tmpl string, o object) error {
	jp, err := parseJSONPath(tmpl)
	if err != nil {
		return usageError{fmt.Errorf("--output jsonpath: %v", err)}
	}
	var data any
	if err := json.Unmarshal(o, &data); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := jp.Execute(&buf, data); err != nil {
		return exitCodeError{code: 2, err: fmt.Errorf("--output jsonpath: %v", err)}
	}
	b := buf.Bytes()
	if !bytes.HasSuffix(b, []byte("\n")) {
		b = append(b, '\n')
	}
	_, err = w.Write(escapeJSON(b))
	return err
}

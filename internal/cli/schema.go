package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/util/jsonpath"

	"github.com/lethehq/lethe/internal/view"
)

// APIVersion is the apiVersion of every object Lethe prints with -o
// json|yaml, and the one apply accepts (docs/output.md).
const APIVersion = view.APIVersion

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

// printObject prints v as an object of kind kind in format (json, yaml,
// name or jsonpath=…).
func printObject(w io.Writer, format, kind string, v any) error {
	o, err := view.ToObject(kind, v)
	if err != nil {
		return err
	}
	return printFormatted(w, format, o)
}

// printList prints items (a slice) as a <kind>List whose items are each
// of kind kind.
func printList(w io.Writer, format, kind string, items any) error {
	objs, err := view.ToObjects(kind, items)
	if err != nil {
		return err
	}
	return printObject(w, format, kind+"List", view.List{Items: objs})
}

// printFormatted writes an object (already with apiVersion and kind) in
// format.
func printFormatted(w io.Writer, format string, o view.Object) error {
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
func printNames(w io.Writer, o view.Object) error {
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
			if err := printNames(w, view.Object(it)); err != nil {
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
func printJSONPath(w io.Writer, tmpl string, o view.Object) error {
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

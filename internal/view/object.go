package view

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// APIVersion is the apiVersion of every object Lethe prints with -o
// json|yaml and serves from its API, and the one apply accepts
// (docs/output.md).
const APIVersion = "lethe.io/v1"

// Object is one value as -o json|yaml prints it and the API serves it:
// its JSON with apiVersion and kind first.
type Object []byte

// MarshalJSON implements json.Marshaler.
func (o Object) MarshalJSON() ([]byte, error) { return o, nil }

// ToObject is v's JSON (an object) with apiVersion lethe.io/v1 and kind
// first. v must not carry an apiVersion but lethe.io/v1, nor a kind other than kind: a
// field named kind that says something else (a row type, the kind of the
// resource a row is about) belongs under another name.
func ToObject(kind string, v any) (Object, error) {
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

// ToObjects is ToObject of each element of the slice items.
func ToObjects(kind string, items any) ([]Object, error) {
	rv := reflect.ValueOf(items)
	if rv.Kind() != reflect.Slice {
		return nil, fmt.Errorf("printing a %sList: not a slice", kind)
	}
	out := make([]Object, 0, rv.Len())
	for i := range rv.Len() {
		o, err := ToObject(kind, rv.Index(i).Interface())
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// List is a list: kind <Kind>List, its items each with apiVersion and
// kind. Next, when set, is the cursor of the next page (the API only).
type List struct {
	Items []Object `json:"items"`
	Next  string   `json:"next,omitempty"`
}

package cli

import (
	"fmt"
	"regexp"
)

// flagParseRE is the tail pflag gives a value that does not parse:
// `invalid argument "abc" for "--workers" flag: strconv.ParseInt: parsing
// "abc": invalid syntax`.
var flagParseRE = regexp.MustCompile(`^(invalid argument ".*" for ".*" flag): strconv\.Parse(Int|Uint|Float|Bool): parsing ".*": (invalid syntax|value out of range)$`)

// flagValueError says what a flag's value should have been, in place of
// the Go parser's words (strconv.ParseInt: parsing "abc": invalid
// syntax); other errors are returned as they are.
func flagValueError(err error) error {
	m := flagParseRE.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	want := map[string]string{"Int": "a whole number", "Uint": "a whole number, 0 or more", "Float": "a number", "Bool": "true or false"}[m[2]]
	if m[3] == "value out of range" {
		return fmt.Errorf("%s: out of range (want %s)", m[1], want)
	}
	return fmt.Errorf("%s: want %s", m[1], want)
}

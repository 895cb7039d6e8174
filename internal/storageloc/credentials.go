package storageloc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/lethehq/lethe/internal/secretfile"
)

// Credentials are a location's static S3 credentials, read from its
// credentials-file. They are never shown, logged or stored.
type Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
}

// ReadCredentials reads a location's credentials file: the AWS shared
// credentials format that Velero's BackupStorageLocation takes (its
// credentials-velero file),
//
//	[default]
//	aws_access_key_id = ...
//	aws_secret_access_key = ...
//
// The [default] profile is used, or the only one when there is one. The
// file follows the secret-file rule (secretfile.Read, as ssh's private
// keys): a file its group or others can read or write is refused before a
// byte of it is read. Errors name the file, never its contents.
func ReadCredentials(path string) (*Credentials, error) {
	data, err := secretfile.Read(path)
	if err != nil {
		return nil, err
	}
	profiles := map[string]map[string]string{}
	var order []string
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[' && line[len(line)-1] == ']':
			section = strings.TrimSpace(line[1 : len(line)-1])
			if _, ok := profiles[section]; !ok {
				profiles[section] = map[string]string{}
				order = append(order, section)
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			return nil, fmt.Errorf("%s: line %d is not a key = value of a [profile]: not an AWS credentials file", path, n)
		}
		profiles[section][strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	p, ok := profiles["default"]
	if !ok && len(order) == 1 {
		p, ok = profiles[order[0]]
	}
	if !ok {
		return nil, fmt.Errorf("%s: no [default] profile (and not exactly one profile)", path)
	}
	c := &Credentials{AccessKeyID: p["aws_access_key_id"], SecretAccessKey: p["aws_secret_access_key"]}
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return nil, errors.New(path + ": the profile needs both aws_access_key_id and aws_secret_access_key")
	}
	return c, nil
}

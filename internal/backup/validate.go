package backup

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxNameLength is the longest name a new backup may have: 63, a
// Kubernetes label value, like Velero's `velero.io/backup-name` label. The
// name appears twice in the storage key (backups/<name>/<name>.tar.zst),
// and the file store keeps <name>.tar.zst as one file name, which most
// file systems cap at 255 bytes: a 253-character DNS subdomain does not
// fit, 63 does everywhere, and the name stays usable as a label value.
const MaxNameLength = 63

// ValidateNewName checks the name of a backup being registered: a DNS
// subdomain of at most MaxNameLength characters.
func ValidateNewName(name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if len(name) > MaxNameLength {
		return fmt.Errorf("invalid backup name %q...: %d characters, at most %d allowed (the name is a storage key and a label value)",
			name[:20], len(name), MaxNameLength)
	}
	return nil
}

// ValidateLabel checks a label in Kubernetes syntax (the rules of
// k8s.io/apimachinery's validation): the key is a qualified name, an
// optional DNS-subdomain prefix and '/', then at most 63 letters, digits,
// '-', '_' or '.', starting and ending with a letter or digit; the value
// is empty or follows the same rule as the name. Anything else could never
// be selected with -l.
func ValidateLabel(key, value string) error {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return fmt.Errorf("label key %q: use an optional DNS-subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', "+
			"starting and ending with a letter or digit (e.g. team, example.com/tier)", key)
	}
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		return fmt.Errorf("label %s=%q: a value is empty, or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", key, value)
	}
	return nil
}

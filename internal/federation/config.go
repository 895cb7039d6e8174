package federation

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/lethehq/lethe/internal/termtext"
)

// Config is one peer's view of the federation.
type Config struct {
	// Name is this peer's name. Its certificate must carry it as a DNS
	// subject alternative name; the other peers know it by it.
	Name string `json:"name"`
	// Listen is the host:port PeerService listens on.
	Listen string `json:"listen"`
	// CAFile is the PEM bundle of the certificate authority that signs
	// every peer's certificate; CertFile and KeyFile are this peer's.
	CAFile   string `json:"caFile"`
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	// Peers are the other peers this one talks to.
	Peers []Peer `json:"peers"`
}

// Peer is another Lethe server.
type Peer struct {
	// Name must be carried by the peer's certificate.
	Name string `json:"name"`
	// Address is the host:port of its PeerService.
	Address string `json:"address"`
	// Accept: this peer stores back-references from it (its half of the
	// double opt-in; the other half is that peer's own configuration,
	// which must name this one to send anything here).
	Accept bool `json:"accept"`
}

// Validate checks c; the error names the first bad field.
func (c *Config) Validate() error {
	if err := peerNameErr(c.Name); err != nil {
		return fmt.Errorf("federation.name: %w", err)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("federation.listen: %q is not host:port", c.Listen)
	}
	for f, v := range map[string]string{"caFile": c.CAFile, "certFile": c.CertFile, "keyFile": c.KeyFile} {
		if v == "" {
			return fmt.Errorf("federation.%s: required (mutual TLS is not optional)", f)
		}
	}
	seen := map[string]bool{}
	for i, p := range c.Peers {
		if err := peerNameErr(p.Name); err != nil {
			return fmt.Errorf("federation.peers[%d].name: %w", i, err)
		}
		if p.Name == c.Name {
			return fmt.Errorf("federation.peers[%d].name: %q is this peer's own name", i, p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("federation.peers[%d].name: %q is listed twice", i, p.Name)
		}
		seen[p.Name] = true
		if _, _, err := net.SplitHostPort(p.Address); err != nil {
			return fmt.Errorf("federation.peers[%d].address: %q is not host:port", i, p.Address)
		}
	}
	return nil
}

// Peer returns the configured peer named name.
func (c *Config) Peer(name string) (Peer, bool) {
	i := slices.IndexFunc(c.Peers, func(p Peer) bool { return p.Name == name })
	if i < 0 {
		return Peer{}, false
	}
	return c.Peers[i], true
}

// Accepts says whether this peer stores back-references from name.
func (c *Config) Accepts(name string) bool {
	p, ok := c.Peer(name)
	return ok && p.Accept
}

// peerNameErr: a peer name is a lower-case DNS name (it is matched
// against a certificate's DNS names, exactly: no wildcard).
func peerNameErr(name string) error {
	if name == "" {
		return errors.New("a peer needs a name")
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("invalid peer name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// maxConfigBytes bounds a federation configuration file.
const maxConfigBytes = 1 << 20

// Load reads and validates the federation configuration at path (YAML or
// JSON, in the shape of Config; an unknown field is refused). Relative
// certificate paths are taken from the file's folder.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("federation configuration: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("federation configuration %s: %w", termtext.Quote(path), err)
	}
	if len(raw) > maxConfigBytes {
		return nil, fmt.Errorf("federation configuration %s: larger than %d bytes", termtext.Quote(path), maxConfigBytes)
	}
	var c Config
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		return nil, fmt.Errorf("federation configuration %s: %w", termtext.Quote(path), err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("federation configuration %s: %w", termtext.Quote(path), err)
	}
	dir := filepath.Dir(path)
	for _, p := range []*string{&c.CAFile, &c.CertFile, &c.KeyFile} {
		if !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	return &c, nil
}

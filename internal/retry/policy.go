package retry

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/lethehq/lethe/pkg/plugin"
)

// Backoff defaults.
const (
	// BaseDefault is the delay before the second attempt. The schedule
	// grows as attempts⁴: 30s, 8m, 40.5m, 2.1h, 5.2h, 10.8h, 20h, then
	// the cap.
	BaseDefault = 30 * time.Second
	// CapDefault bounds one delay (before jitter).
	CapDefault = 24 * time.Hour
	// MaxAttemptsDefault attempts (about 3.6 days with the defaults)
	// before a row is discarded to the dead letters.
	MaxAttemptsDefault = 10
	// JitterDefault spreads each delay uniformly by ±10%, so that rows
	// that failed together do not all come back in the same second.
	JitterDefault = 0.1
)

// Backoff is one retry schedule.
//
// After attempt n (n ≥ 1) failed, the next attempt is at
//
//	now + max(min(Base·n⁴, Cap)·(1 + J), retryAfter)
//
// with J uniform in [-Jitter, +Jitter], and retryAfter the delay the
// plugin asked for (plugin.Blocked), zero when it asked for none: a row
// is never tried before its plugin said it could succeed. Once n reaches
// MaxAttempts the row is discarded instead.
//
// The polynomial is River's (attempt⁴ with jitter): it stays close to
// the first failure for transient errors, then backs off quickly.
type Backoff struct {
	Base        time.Duration `json:"base"`
	Cap         time.Duration `json:"cap"`
	MaxAttempts int           `json:"maxAttempts"`
	Jitter      float64       `json:"jitter"`
}

// DefaultBackoff is the schedule when nothing is configured.
func DefaultBackoff() Backoff {
	return Backoff{Base: BaseDefault, Cap: CapDefault, MaxAttempts: MaxAttemptsDefault, Jitter: JitterDefault}
}

// Delay is the delay after attempt n without jitter.
func (b Backoff) Delay(n int) time.Duration {
	n = max(n, 1)
	// n⁴ overflows nothing until n is in the hundreds of thousands;
	// compare in float to cap cleanly.
	d := float64(b.Base) * float64(n) * float64(n) * float64(n) * float64(n)
	if d >= float64(b.Cap) {
		return b.Cap
	}
	return time.Duration(d)
}

// Next is when attempt n+1 may run, given that attempt n just ended at
// now and that the plugin asked for retryAfter (zero: no wish). r draws
// the jitter (nil: the global source).
func (b Backoff) Next(now time.Time, n int, retryAfter time.Duration, r *rand.Rand) time.Time {
	d := b.Delay(n)
	if b.Jitter > 0 {
		u := rand.Float64
		if r != nil {
			u = r.Float64
		}
		d = time.Duration(float64(d) * (1 + b.Jitter*(2*u()-1)))
	}
	return now.Add(max(d, retryAfter))
}

// Policy is the global schedule and the schedules of single plugins.
type Policy struct {
	Default Backoff `json:"default"`
	// Plugins holds per-plugin overrides, by full plugin name; a zero
	// field of an override takes the default's.
	Plugins map[string]Backoff `json:"plugins,omitempty"`
}

// For returns the schedule of a plugin ("" for rows that wait on no
// plugin).
func (p Policy) For(pluginName string) Backoff {
	b := p.Default
	if o, ok := p.Plugins[pluginName]; ok && pluginName != "" {
		if o.Base > 0 {
			b.Base = o.Base
		}
		if o.Cap > 0 {
			b.Cap = o.Cap
		}
		if o.MaxAttempts > 0 {
			b.MaxAttempts = o.MaxAttempts
		}
		if o.Jitter > 0 {
			b.Jitter = o.Jitter
		}
	}
	return b
}

func (p Policy) validate() error {
	check := func(who string, b Backoff) error {
		switch {
		case b.Base <= 0:
			return fmt.Errorf("retry backoff%s: the base delay must be positive, got %s", who, b.Base)
		case b.Cap < b.Base:
			return fmt.Errorf("retry backoff%s: the cap %s is below the base %s", who, b.Cap, b.Base)
		case b.MaxAttempts < 1:
			return fmt.Errorf("retry max attempts%s: must be at least 1, got %d", who, b.MaxAttempts)
		case b.Jitter < 0 || b.Jitter >= 1:
			return fmt.Errorf("retry jitter%s: must be in [0, 1), got %g", who, b.Jitter)
		}
		return nil
	}
	if err := check("", p.Default); err != nil {
		return err
	}
	for name := range p.Plugins {
		if err := check(" of "+name, p.For(name)); err != nil {
			return err
		}
	}
	return nil
}

// ParsePolicy builds a Policy from the values of --retry-backoff and
// --retry-max-attempts. Each value is either global (`2m`, `12`) or for
// one plugin (`example.com/ebs=5m`, `example.com/ebs=20`); a bare plugin
// name means lethe.io/NAME, as everywhere. The last global value wins.
func ParsePolicy(backoffs, maxAttempts []string) (Policy, error) {
	p := Policy{Default: DefaultBackoff(), Plugins: map[string]Backoff{}}
	split := func(flag, v string) (string, string, error) {
		name, val, ok := strings.Cut(strings.TrimSpace(v), "=")
		if !ok {
			return "", name, nil
		}
		full, err := plugin.NormalizeName(name)
		if err != nil {
			return "", "", fmt.Errorf("%s %q: %w", flag, v, err)
		}
		return full, val, nil
	}
	for _, v := range backoffs {
		name, val, err := split("--retry-backoff", v)
		if err != nil {
			return Policy{}, err
		}
		d, err := time.ParseDuration(val)
		if err != nil || d <= 0 {
			return Policy{}, fmt.Errorf("--retry-backoff %q: use a positive base delay such as 30s, or NAME=DELAY for one plugin", v)
		}
		if d > CapDefault {
			return Policy{}, fmt.Errorf("--retry-backoff %q: the base delay may be at most %s", v, CapDefault)
		}
		if name == "" {
			p.Default.Base = d
			continue
		}
		o := p.Plugins[name]
		o.Base = d
		p.Plugins[name] = o
	}
	for _, v := range maxAttempts {
		name, val, err := split("--retry-max-attempts", v)
		if err != nil {
			return Policy{}, err
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 {
			return Policy{}, fmt.Errorf("--retry-max-attempts %q: use a whole number of at least 1, or NAME=N for one plugin", v)
		}
		if name == "" {
			p.Default.MaxAttempts = n
			continue
		}
		o := p.Plugins[name]
		o.MaxAttempts = n
		p.Plugins[name] = o
	}
	return p, p.validate()
}

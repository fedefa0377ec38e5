// Package config loads and validates the exporter's YAML configuration
// (docs/configuration.md: "Configuration"). It checks the file itself and that referenced files can be
// read; what those files contain is each check's business, so a rotated key
// is picked up without a reload.
package config

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/egress-proxies/provider_health_exporter/internal/boundedfile"
	"github.com/egress-proxies/provider_health_exporter/internal/redact"
)

// DefaultTimeout is the timeout of every check whose entry and defaults
// set none (docs/configuration.md: "Configuration"). The defaults of a
// kind's own keys are in its package.
const DefaultTimeout = Duration(10 * time.Second)

// Config is the whole file.
type Config struct {
	Defaults Defaults

	sections []sectionEntries // in the order of the sections Load was given
}

// Defaults apply to every provider entry that does not set its own.
type Defaults struct {
	Timeout     *Duration `yaml:"timeout,omitempty"` // set by Load
	MinInterval Duration  `yaml:"min_interval,omitempty"`
}

// Duration is a duration written as Prometheus writes them ("10s",
// "1m30s"); a bad value is reported with its line.
type Duration model.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(value *yaml.Node) error {
	md, err := model.ParseDuration(value.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a valid duration (examples: 500ms, 10s, 1m30s)", value.Line, value.Value)
	}
	*d = Duration(md)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return model.Duration(d).String(), nil }

func (d Duration) String() string { return model.Duration(d).String() }

// Check holds the settings every provider entry shares. After Load both
// pointers are set: to the entry's own value or to the file's default.
type Check struct {
	Timeout     *Duration `yaml:"timeout,omitempty"`
	MinInterval *Duration `yaml:"min_interval,omitempty"`
}

// Load reads, parses and validates the file at path through sections: the
// kinds the file may configure (the exporter's table of kinds), in the
// order the summary and /api/v1/config list them. Relative file paths are
// taken relative to the file, as Prometheus does.
func Load(path string, sections []Section) (*Config, error) {
	data, err := boundedfile.Read(path, boundedfile.Config)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	cfg, err := parse(data, filepath.Dir(path), sections)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

// Parse parses and validates a configuration of the given sections.
// Unknown keys are errors. Relative file paths are taken relative to the
// working directory.
func Parse(data []byte, sections []Section) (*Config, error) {
	return parse(data, "", sections)
}

func parse(data []byte, dir string, sections []Section) (*Config, error) {
	return parseWith(data, dir, sections, largeFiles)
}

// parseWith is parse with large files decoded list by list as ch says
// (decodeLarge), and decoded whole when that does not work out, if they
// are not too large for it (chunking.whole).
func parseWith(data []byte, dir string, sections []Section, ch chunking) (*Config, error) {
	cfg := &Config{}
	fileErr, err := cfg.decodeLarge(data, sections, ch)
	if fileErr != nil {
		return nil, fileErr
	}
	if err != nil && len(data) > ch.whole {
		return nil, refusal(err, len(data), ch)
	}
	if err != nil {
		cfg = &Config{}
		top, err := rootMapping(data)
		if err != nil {
			return nil, err
		}
		if err := cfg.decode(top, sections); err != nil {
			return nil, err
		}
	}
	cfg.resolvePaths(dir)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// MarshalYAML writes the configuration as it is in force: defaults, then
// every section in the order of the sections, empty ones left out, with
// every URL redacted (redactNode).
func (c *Config) MarshalYAML() (any, error) {
	out := &yaml.Node{Kind: yaml.MappingNode}
	add := func(key string, v any) error {
		var n yaml.Node
		if err := n.Encode(v); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		redactNode(&n)
		out.Content = append(out.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, &n)
		return nil
	}
	if c.Defaults != (Defaults{}) {
		if err := add("defaults", c.Defaults); err != nil {
			return nil, err
		}
	}
	for _, s := range c.sections {
		if len(s.entries) > 0 {
			if err := add(s.Kind, s.entries); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// redactNode redacts every string of n that is a URL (redact.URL), as
// every address the exporter shows is: /config must not show a URL's
// userinfo or query values, which can be secrets.
func redactNode(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		n.Value = redact.URL(n.Value)
	}
	for _, c := range n.Content {
		redactNode(c)
	}
}

func (ch *Check) resolve(d Defaults, where string) error {
	if ch.Timeout == nil {
		t := *d.Timeout
		ch.Timeout = &t
	}
	if *ch.Timeout <= 0 {
		return fmt.Errorf("%s: timeout: must be positive, got %s", where, ch.Timeout)
	}
	if ch.MinInterval == nil {
		m := d.MinInterval
		ch.MinInterval = &m
	}
	if *ch.MinInterval < 0 {
		return fmt.Errorf("%s: min_interval: must not be negative", where)
	}
	return nil
}

// TimeoutDuration is the effective check timeout.
func (ch Check) TimeoutDuration() time.Duration {
	if ch.Timeout == nil {
		return time.Duration(DefaultTimeout)
	}
	return time.Duration(*ch.Timeout)
}

// MinIntervalDuration is the effective min_interval.
func (ch Check) MinIntervalDuration() time.Duration {
	if ch.MinInterval == nil {
		return 0
	}
	return time.Duration(*ch.MinInterval)
}

// ValidName checks a name of the file (an entry's, a kvm host's): set,
// and free of control characters; where names it for the error.
func ValidName(where, name string) error {
	if name == "" {
		return fmt.Errorf("%s: name: missing (required)", where)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s: name: %q contains a control character", where, name)
		}
	}
	return nil
}

// Readable checks that a file an entry references (the value of its key
// field) exists and can be read as a file of kind, within the cap of that
// kind (docs/security.md: "What the exporter bounds"), as the check will
// read it, without judging its contents; an empty path is not set.
func Readable(where, field string, kind boundedfile.Kind, path string) error {
	if path == "" {
		return nil
	}
	// Stat first: opening a FIFO or a device could block or never end.
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", where, field, err)
	}
	if st.IsDir() {
		return fmt.Errorf("%s: %s: %s is a directory", where, field, path)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: %s: %s is not a regular file", where, field, path)
	}
	// Opened without blocking.
	if err := boundedfile.Check(path, kind); err != nil {
		return fmt.Errorf("%s: %s: %w", where, field, err)
	}
	return nil
}

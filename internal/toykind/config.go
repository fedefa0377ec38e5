package toykind

import (
	"fmt"
	"net"
	"net/url"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// Entry is one entry of the toy section.
type Entry struct {
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	// Resolver is the DNS server (host:port) the check asks for the URL's
	// name, instead of the system's: how the test keeps lookups on
	// loopback in the real binary.
	Resolver     string `yaml:"resolver,omitempty"`
	config.Check `yaml:",inline"`
}

// Section is the toy section of the configuration file: its key and an
// entry with the kind's defaults (none beyond the file's defaults).
func Section() config.Section {
	return config.Section{Kind: Name, New: func() config.Entry { return &Entry{} }}
}

// EntryName implements config.Entry.
func (e *Entry) EntryName() string { return e.Name }

// ResolvePaths implements config.Entry: the entry names no file.
func (e *Entry) ResolvePaths(func(*string)) {}

// TargetCount implements config.Entry: one URL.
func (e *Entry) TargetCount() int { return 1 }

// Validate implements config.Entry.
func (e *Entry) Validate(where string) error {
	if e.URL == "" {
		return fmt.Errorf("%s: url: missing (required)", where)
	}
	if u, err := url.Parse(e.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s: url: %q is not an http(s) URL", where, e.URL)
	}
	if e.Resolver != "" {
		if _, _, err := net.SplitHostPort(e.Resolver); err != nil {
			return fmt.Errorf("%s: resolver: %w", where, err)
		}
	}
	return nil
}

// SchemaKeywords implements config.SchemaKeywordser: what the schema cannot
// tell from the struct's types.
func (Entry) SchemaKeywords() map[string]config.Keywords {
	return map[string]config.Keywords{
		"":         {"required": []string{"url"}},
		"url":      {"pattern": "^[Hh][Tt][Tt][Pp][Ss]?://", "description": "The URL that must answer 200."},
		"resolver": {"description": "DNS server (host:port) asked for the URL's name instead of the system's."},
	}
}

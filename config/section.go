package config

import (
	"fmt"
	"path/filepath"
)

// Section is one kind of provider's part of the file: a list of entries
// under the kind's name (docs/configuration.md: "Configuration"). The file is read
// through the sections it is given, so adding a kind is a Section of its
// own and no edit here.
type Section struct {
	// Kind is the section's key in the file, and the provider label.
	Kind string
	// New returns an entry holding the kind's defaults, which the file's
	// values then overwrite. Its type's yaml tags are the keys an entry
	// may have; any other key is an error.
	New func() Entry
	// Summary, when set, says how many entries the section has for
	// --config.check, when more than the count is worth saying; the
	// default is "N kind".
	Summary func(entries []Entry) string
}

// Entry is one entry of a section.
type Entry interface {
	// EntryName is the entry's name: the name label, unique across the
	// file.
	EntryName() string
	// Settings are the settings every entry shares, which Load resolves
	// against the file's defaults (the promoted method of an embedded
	// Check).
	Settings() *Check
	// ResolvePaths calls join on every local file path of the entry, which
	// makes a relative one relative to the configuration file.
	ResolvePaths(join func(*string))
	// Validate checks the kind's own settings, fills in what is derived
	// from them and checks that the files they reference can be read;
	// where names the entry for the error.
	Validate(where string) error
	// TargetCount is the number of targets the entry configures.
	TargetCount() int
}

// Settings returns ch itself, so that an entry embedding Check has the
// Settings of Entry.
func (ch *Check) Settings() *Check { return ch }

// sectionEntries are the entries of one section, in file order.
type sectionEntries struct {
	Section
	entries []Entry
}

// Entries lists the entries of kind, in file order.
func (c *Config) Entries(kind string) []Entry {
	for _, s := range c.sections {
		if s.Kind == kind {
			return s.entries
		}
	}
	return nil
}

// EntriesOf lists the entries of kind as the type T its section makes, in
// file order; an entry of another type is left out.
func EntriesOf[T Entry](c *Config, kind string) []T {
	var out []T
	for _, e := range c.Entries(kind) {
		if t, ok := e.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// AllEntries lists the entries of every section, section by section.
func (c *Config) AllEntries() []Entry {
	var out []Entry
	for _, s := range c.sections {
		out = append(out, s.entries...)
	}
	return out
}

// resolvePaths makes relative paths of local files relative to dir.
func (c *Config) resolvePaths(dir string) {
	if dir == "" {
		return
	}
	join := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for _, s := range c.sections {
		for _, e := range s.entries {
			if e != nil {
				e.ResolvePaths(join)
			}
		}
	}
}

func (c *Config) validate() error {
	if c.Defaults.Timeout == nil {
		t := DefaultTimeout
		c.Defaults.Timeout = &t
	}
	if *c.Defaults.Timeout <= 0 {
		return fmt.Errorf("defaults: timeout: must be positive, got %s", c.Defaults.Timeout)
	}
	if c.Defaults.MinInterval < 0 {
		return fmt.Errorf("defaults: min_interval: must not be negative")
	}
	names := map[string]string{}
	for _, s := range c.sections {
		for i, e := range s.entries {
			if e == nil {
				return fmt.Errorf("%s[%d]: empty entry", s.Kind, i)
			}
			where := entry(s.Kind, i, e.EntryName())
			if err := ValidName(where, e.EntryName()); err != nil {
				return err
			}
			if err := e.Validate(where); err != nil {
				return err
			}
			if err := e.Settings().resolve(c.Defaults, where); err != nil {
				return err
			}
			if prev, ok := names[e.EntryName()]; ok {
				return fmt.Errorf("%s: name: %q is already used by %s (names are unique across the file)", where, e.EntryName(), prev)
			}
			names[e.EntryName()] = where
		}
	}
	return nil
}

func entry(kind string, i int, name string) string {
	if name == "" {
		return fmt.Sprintf("%s[%d]", kind, i)
	}
	return fmt.Sprintf("%s[%d] %q", kind, i, name)
}

// Targets is the number of targets the file configures.
func (c *Config) Targets() int {
	n := 0
	for _, s := range c.sections {
		for _, e := range s.entries {
			if e != nil {
				n += e.TargetCount()
			}
		}
	}
	return n
}

// Summary is the one line --config.check prints for a valid file: each
// section's count, in the order of the sections, and the targets.
func (c *Config) Summary() string {
	out := ""
	for i, s := range c.sections {
		if i > 0 {
			out += ", "
		}
		if s.Summary != nil {
			out += s.Summary(s.entries)
		} else {
			out += fmt.Sprintf("%d %s", len(s.entries), s.Kind)
		}
	}
	return fmt.Sprintf("%s: %d targets", out, c.Targets())
}

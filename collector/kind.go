package collector

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// Kind is one kind of provider, all the exporter knows of it: its name,
// its reasons, its part of the configuration file, how to build the
// checker of an entry and what --config.check says of an entry's files.
// The exporter's table of kinds is a list of these, one row a kind
// (docs/development.md: "Adding a provider"); the engine, /metrics' collect[],
// --config.check, the reload and the write deadline read it and nothing
// else.
type Kind struct {
	// Section is the kind's part of the configuration file; its Kind is
	// the kind's name, the provider label.
	Section config.Section
	// Reasons is the kind's closed reason set with each reason's up flag.
	Reasons ReasonSet
	// NewChecker builds the checker of one entry of the section (the
	// Entry its Section's New returned, validated); it does no network
	// I/O. The logger carries the provider and name.
	NewChecker func(entry config.Entry, logger *slog.Logger) (Checker, error)
	// FileWarnings, when set, reads the files the entry references the
	// way a check does and says what a check would reject, for
	// --config.check.
	FileWarnings func(entry config.Entry) []string
	// EntryReasons, when set, is the reason set of one entry, a subset of
	// Reasons: reasons that only an opt-in key's check gives are left out
	// of the state set of an entry that does not set it, so that opting in
	// is what adds their series (docs/configuration.md).
	EntryReasons func(entry config.Entry) ReasonSet
	// MultiTarget is set when an entry has several targets, one per item
	// of its configuration, which /probe selects with target=; /sd then
	// lists each target with its own target parameter, so that each is
	// its own scrape and shard, even in an entry of one item. Otherwise
	// an entry has exactly one target, which name= alone selects.
	MultiTarget bool
}

// Name is the kind's name: its section's key and the provider label.
func (k Kind) Name() string { return k.Section.Kind }

// Validate checks that the kind is complete: a name, a section, a
// checker and a reason set the engine accepts.
func (k Kind) Validate() error {
	var errs []error
	if k.Name() == "" {
		errs = append(errs, errors.New("kind has no name (Section.Kind)"))
	}
	if k.Section.New == nil {
		errs = append(errs, errors.New("kind has no Section.New"))
	}
	if k.NewChecker == nil {
		errs = append(errs, errors.New("kind has no NewChecker"))
	}
	if err := k.Reasons.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kind %q: %w", k.Name(), err)
	}
	return nil
}

// Sections are the configuration sections of kinds, in their order.
func Sections(kinds []Kind) []config.Section {
	out := make([]config.Section, len(kinds))
	for i, k := range kinds {
		out[i] = k.Section
	}
	return out
}

// Entries describes to the engine every entry of cfg, kind by kind in the
// order of kinds. The fingerprint of an entry is its settings: a reload
// that leaves them alone keeps the checker, its clients, tokens,
// connections and cached verdicts.
func Entries(kinds []Kind, cfg *config.Config, logger *slog.Logger) []Entry {
	var out []Entry
	for _, k := range kinds {
		for _, ce := range cfg.Entries(k.Name()) {
			name, check := ce.EntryName(), ce.Settings()
			reasons := k.Reasons
			if k.EntryReasons != nil {
				reasons = k.EntryReasons(ce)
			}
			out = append(out, Entry{
				Kind: k.Name(), Name: name, Reasons: reasons,
				Timeout: check.TimeoutDuration(), MinInterval: check.MinIntervalDuration(),
				Fingerprint: fingerprint(ce),
				Build: func() (Checker, error) {
					return k.NewChecker(ce, logger.With("provider", k.Name(), "name", name))
				},
			})
		}
	}
	return out
}

// FileWarnings asks each kind to read the files of its entries as its
// check would, so that --config.check and the checks never disagree.
func FileWarnings(kinds []Kind, cfg *config.Config) []string {
	var out []string
	for _, k := range kinds {
		if k.FileWarnings == nil {
			continue
		}
		for _, ce := range cfg.Entries(k.Name()) {
			for _, w := range k.FileWarnings(ce) {
				out = append(out, fmt.Sprintf("%s %q: %s", k.Name(), ce.EntryName(), w))
			}
		}
	}
	return out
}

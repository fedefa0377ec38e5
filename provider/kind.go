package provider

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// Kind is one kind of provider, all the exporter knows of it: its name,
// its reasons, its part of the configuration file, how to build the
// checker of an entry and what --config.check says of an entry's files.
// The exporter's table of kinds is a list of these, one row a kind
// (docs/development.md: "Adding a provider"); the engine, /metrics' collect[],
// --config.check, the reload and the write deadline read it and nothing
// else. A Kind is made by NewKind, which types it once.
type Kind struct {
	section      config.Section
	reasons      ReasonSet
	classifiers  []Classifier
	newChecker   func(config.Entry, *slog.Logger, ...Option) (Checker, error)
	fileWarnings func(config.Entry) []string
	entryReasons func(config.Entry) ReasonSet
	multiTarget  bool
	doc          KindDoc
	// entryType is what the kind's functions take, and checkEntry tells
	// whether an entry is of it, so that Validate can hold the section to
	// the same type.
	entryType  string
	checkEntry func(config.Entry) bool
}

// KindOf is the definition of a kind whose entries are of type E (what its
// Section's New returns) and whose checkers are of type C: each function
// takes the entry as the kind declared it, and NewKind does the one
// conversion from config.Entry for all of them.
type KindOf[E config.Entry, C Checker] struct {
	// Section is the kind's part of the configuration file; its Kind is
	// the kind's name, the provider label.
	Section config.Section
	// Reasons is the kind's closed reason set with each reason's up flag,
	// in the order docs/metrics.md lists them.
	Reasons ReasonSet
	// Classifiers are the shared classifiers the kind's checker calls
	// (TransportErrors). Their reasons are added to Reasons where it lacks them,
	// so that no verdict they give is outside the set (docs/development.md:
	// "Adding a provider").
	Classifiers []Classifier
	// NewChecker builds the checker of one entry of the section (the
	// Entry its Section's New returned, validated); it does no network
	// I/O. The logger carries the provider and name. A provider package's
	// New is this function.
	NewChecker func(entry E, logger *slog.Logger, opts ...Option) (C, error)
	// FileWarnings, when set, reads the files the entry references the
	// way a check does and says what a check would reject, for
	// --config.check.
	FileWarnings func(entry E) []string
	// EntryReasons, when set, is the reason set of one entry, a subset of
	// Reasons: reasons that only an opt-in key's check gives are left out
	// of the state set of an entry that does not set it, so that opting in
	// is what adds their series (docs/configuration.md).
	EntryReasons func(entry E) ReasonSet
	// MultiTarget is set when an entry has several targets, one per item
	// of its configuration, which /probe selects with target=; /sd then
	// lists each target with its own target parameter, so that each is
	// its own scrape and shard, even in an entry of one item. Otherwise
	// an entry has exactly one target, which name= alone selects.
	MultiTarget bool
	// Doc is what the documentation says of the kind and of each of its
	// reasons, which `make generate` writes into the docs (KindDoc).
	Doc KindDoc
}

// NewKind makes the Kind of def. What is wrong with def is said by the
// Kind's Validate, which the table of kinds runs at startup (NewTable).
func NewKind[E config.Entry, C Checker](def KindOf[E, C]) Kind {
	k := Kind{
		section:     def.Section,
		reasons:     def.Reasons.With(def.Classifiers...),
		classifiers: def.Classifiers,
		multiTarget: def.MultiTarget,
		doc:         def.Doc,
		entryType:   fmt.Sprintf("%T", *new(E)),
		checkEntry:  func(e config.Entry) bool { _, ok := e.(E); return ok },
	}
	if def.NewChecker != nil {
		k.newChecker = func(e config.Entry, logger *slog.Logger, opts ...Option) (Checker, error) {
			entry, err := entryAs[E](k.Name(), e)
			if err != nil {
				return nil, err
			}
			c, err := def.NewChecker(entry, logger, opts...)
			if err != nil {
				// Not c: a nil C in a Checker is not a nil Checker.
				return nil, err
			}
			return c, nil
		}
	}
	if def.FileWarnings != nil {
		k.fileWarnings = func(e config.Entry) []string {
			entry, err := entryAs[E](k.Name(), e)
			if err != nil {
				return []string{err.Error()}
			}
			return def.FileWarnings(entry)
		}
	}
	if def.EntryReasons != nil {
		k.entryReasons = func(e config.Entry) ReasonSet {
			entry, err := entryAs[E](k.Name(), e)
			if err != nil {
				return k.reasons
			}
			// The classifiers' reasons stay in every entry's set.
			return def.EntryReasons(entry).With(def.Classifiers...)
		}
	}
	return k
}

// entryAs is e as the kind's entry type. Validate holds the section's New
// to that type, so an error here means an entry from another section.
func entryAs[E config.Entry](kind string, e config.Entry) (E, error) {
	entry, ok := e.(E)
	if !ok {
		return entry, fmt.Errorf("%s entry of type %T, want %T", kind, e, entry)
	}
	return entry, nil
}

// Name is the kind's name: its section's key and the provider label.
func (k Kind) Name() string { return k.section.Kind }

// Section is the kind's part of the configuration file.
func (k Kind) Section() config.Section { return k.section }

// Reasons is the kind's closed reason set.
func (k Kind) Reasons() ReasonSet { return k.reasons }

// Classifiers are the shared classifiers the kind lists (KindOf.Classifiers).
func (k Kind) Classifiers() []Classifier { return slices.Clone(k.classifiers) }

// MultiTarget tells whether an entry of the kind has a target per item of
// its configuration (KindOf.MultiTarget).
func (k Kind) MultiTarget() bool { return k.multiTarget }

// EntryReasons is the reason set of one entry of the kind.
func (k Kind) EntryReasons(e config.Entry) ReasonSet {
	if k.entryReasons == nil {
		return k.reasons
	}
	return k.entryReasons(e)
}

// NewChecker builds the checker of one entry of the kind.
func (k Kind) NewChecker(e config.Entry, logger *slog.Logger, opts ...Option) (Checker, error) {
	if k.newChecker == nil {
		return nil, fmt.Errorf("kind %q has no NewChecker", k.Name())
	}
	return k.newChecker(e, logger, opts...)
}

// FileWarnings says what a check would reject of the files an entry of
// the kind references; nil when the kind reads none.
func (k Kind) FileWarnings(e config.Entry) []string {
	if k.fileWarnings == nil {
		return nil
	}
	return k.fileWarnings(e)
}

// Validate checks the kind's contract with the framework: a name that is
// a lowercase word, a section whose entries are of the type the kind's
// functions take, a checker, and a reason set the engine accepts, with
// the reasons every kind can give (EngineReasons, UnknownReason), the
// shared reasons' up flags and every reason its classifiers can return. The error names the kind.
func (k Kind) Validate() error {
	var errs []error
	if k.Name() == "" {
		errs = append(errs, errors.New("kind has no name (Section.Kind)"))
	} else if err := validKindName(k.Name()); err != nil {
		errs = append(errs, err)
	}
	switch {
	case k.section.New == nil:
		errs = append(errs, errors.New("kind has no Section.New"))
	case k.checkEntry != nil && !k.checkEntry(k.section.New()):
		errs = append(errs, fmt.Errorf("Section.New returns %T, but the kind's functions take %s", k.section.New(), k.entryType))
	}
	if k.newChecker == nil {
		errs = append(errs, errors.New("kind has no NewChecker (made by NewKind?)"))
	}
	if err := k.reasons.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, sharedReasons(k.reasons)...)
	for _, c := range k.classifiers {
		if err := c.Within(k.reasons); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kind %q: %w", k.Name(), err)
	}
	return nil
}

// sharedReasons checks a kind's set against the shared vocabulary: a
// shared reason has the up flag it has in every kind, since
// docs/metrics.md gives each reason one up value. Which shared reasons a
// set has is the kind's to say, by what its checker can give: only those
// the engine itself gives are demanded (ReasonSet.Validate).
func sharedReasons(set ReasonSet) []error {
	var errs []error
	shared := AuthenticatedHTTPReasons()
	for _, d := range set {
		if shared.Contains(d.Reason) && shared.Up(d.Reason) != d.Up {
			errs = append(errs, fmt.Errorf("reason %s must have up=%v, as in every kind (docs/metrics.md: \"Reasons\")", d.Reason, shared.Up(d.Reason)))
		}
	}
	return errs
}

// NewTable checks every kind of the exporter's table, and that their names
// are unique and none is a name the file or collect[] already uses, and
// returns the table: what main does first, so that a kind that breaks the
// framework's contract stops the exporter with an error naming it instead
// of giving wrong verdicts.
func NewTable(kinds ...Kind) ([]Kind, error) {
	var errs []error
	seen := map[string]bool{}
	for _, k := range kinds {
		if err := k.Validate(); err != nil {
			errs = append(errs, err)
		}
		if why, ok := reservedKindNames[k.Name()]; ok {
			errs = append(errs, fmt.Errorf("kind %q: the name is taken by %s", k.Name(), why))
		}
		if seen[k.Name()] && k.Name() != "" {
			errs = append(errs, fmt.Errorf("kind %q is in the table twice: a kind's name is its section's key and provider label, and must be unique", k.Name()))
		}
		seen[k.Name()] = true
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return kinds, nil
}

// reservedKindNames are the names a kind cannot have: the configuration
// file's own section and collect[]'s value for the exporter's own metrics.
var reservedKindNames = map[string]string{
	"defaults": "the configuration file's defaults section",
	"exporter": "collect[]=exporter, the exporter's own metrics",
}

// validKindName checks that a kind's name is a lowercase word: it is a
// key of the file, a label value and a collect[] value.
func validKindName(name string) error {
	for i, c := range name {
		if (c < 'a' || c > 'z') && (i == 0 || (c < '0' || c > '9') && c != '_') {
			return fmt.Errorf("kind name %q is not a lowercase word (a-z, then a-z, 0-9 or _)", name)
		}
	}
	return nil
}

// Sections are the configuration sections of kinds, in their order.
func Sections(kinds []Kind) []config.Section {
	out := make([]config.Section, len(kinds))
	for i, k := range kinds {
		out[i] = k.section
	}
	return out
}

// FileWarnings asks each kind to read the files of its entries as its
// check would, so that --config.check and the checks never disagree.
func FileWarnings(kinds []Kind, cfg *config.Config) []string {
	var out []string
	for _, k := range kinds {
		for _, ce := range cfg.Entries(k.Name()) {
			for _, w := range k.FileWarnings(ce) {
				out = append(out, fmt.Sprintf("%s %q: %s", k.Name(), ce.EntryName(), w))
			}
		}
	}
	return out
}

// Warnings are the messages of the errors that are not nil: a FileWarnings
// made of a kind's CheckFiles.
func Warnings(errs ...error) []string {
	var out []string
	for _, err := range errs {
		if err != nil {
			out = append(out, err.Error())
		}
	}
	return out
}

package provider

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// toyEntry and toyChecker are a kind's own types, which NewKind's
// functions take and return as they are.
type toyEntry struct {
	Name         string `yaml:"name"`
	Opt          bool   `yaml:"opt"`
	config.Check `yaml:",inline"`
}

func (e *toyEntry) EntryName() string          { return e.Name }
func (e *toyEntry) ResolvePaths(func(*string)) {}
func (e *toyEntry) Validate(string) error      { return nil }
func (e *toyEntry) TargetCount() int           { return 1 }

type otherEntry struct{ toyEntry }

type toyChecker struct{ entry *toyEntry }

func (c *toyChecker) Targets() []Target { return one(c.entry.Name) }
func (c *toyChecker) Check(context.Context, *slog.Logger, string) Verdict {
	return Verdict{Reason: ReasonReady}
}

const reasonOptIn Reason = "OptIn"

func toyDef() KindOf[*toyEntry, *toyChecker] {
	return KindOf[*toyEntry, *toyChecker]{
		Section: config.Section{Kind: "toy", New: func() config.Entry { return &toyEntry{} }},
		Reasons: append(EngineReasons(), ReasonDef{reasonOptIn, true}, UnknownReason()),
		NewChecker: func(e *toyEntry, _ *slog.Logger, _ ...Option) (*toyChecker, error) {
			if e.Name == "fail" {
				return nil, errors.New("cannot build")
			}
			return &toyChecker{entry: e}, nil
		},
		FileWarnings: func(e *toyEntry) []string { return Warnings(nil, errors.New("file of "+e.Name), nil) },
		EntryReasons: func(e *toyEntry) ReasonSet {
			if e.Opt {
				return append(EngineReasons(), ReasonDef{reasonOptIn, true}, UnknownReason())
			}
			return append(EngineReasons(), UnknownReason())
		},
	}
}

// TestNewKind: the kind's functions get the entry as the kind's own type,
// a failed build is a nil Checker with the error, and an entry of another
// type is an error, never a panic.
func TestNewKind(t *testing.T) {
	t.Parallel()
	k := NewKind(toyDef())
	if err := k.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := k.NewChecker(&toyEntry{Name: "a"}, discard())
	if err != nil || c.Targets()[0].Name != "a" {
		t.Fatalf("NewChecker = %v, %v", c, err)
	}
	c, err = k.NewChecker(&toyEntry{Name: "fail"}, discard())
	if err == nil || c != nil {
		t.Errorf("a failed build gave %#v, %v; want a nil Checker and the error", c, err)
	}
	if _, err := k.NewChecker(&otherEntry{}, discard()); err == nil || !strings.Contains(err.Error(), "toy entry of type *provider.otherEntry") {
		t.Errorf("NewChecker of another entry type: %v", err)
	}
	if got := k.FileWarnings(&toyEntry{Name: "a"}); len(got) != 1 || got[0] != "file of a" {
		t.Errorf("FileWarnings = %q", got)
	}
	if k.EntryReasons(&toyEntry{}).Contains(reasonOptIn) || !k.EntryReasons(&toyEntry{Opt: true}).Contains(reasonOptIn) {
		t.Error("EntryReasons does not follow the entry")
	}
	def := toyDef()
	def.EntryReasons = nil
	if got := NewKind(def).EntryReasons(&toyEntry{}); !got.Contains(reasonOptIn) {
		t.Errorf("without EntryReasons an entry's set is the kind's; got %v", got.Reasons())
	}
}

// TestKindValidate: what a kind lacks, or a section that makes entries of
// another type than the kind's functions take, is an error naming the kind.
func TestKindValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*KindOf[*toyEntry, *toyChecker])
		want string
	}{
		{"no name", func(d *KindOf[*toyEntry, *toyChecker]) { d.Section.Kind = "" }, "kind has no name"},
		{"no New", func(d *KindOf[*toyEntry, *toyChecker]) { d.Section.New = nil }, `kind "toy": kind has no Section.New`},
		{"no checker", func(d *KindOf[*toyEntry, *toyChecker]) { d.NewChecker = nil }, `kind "toy": kind has no NewChecker`},
		{"section of another type", func(d *KindOf[*toyEntry, *toyChecker]) {
			d.Section.New = func() config.Entry { return &otherEntry{} }
		}, `kind "toy": Section.New returns *provider.otherEntry, but the kind's functions take *provider.toyEntry`},
		{"no Unknown", func(d *KindOf[*toyEntry, *toyChecker]) { d.Reasons = EngineReasons() }, `kind "toy": reason set lacks Unknown`},
	} {
		def := toyDef()
		tc.edit(&def)
		if err := NewKind(def).Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := (Kind{}).Validate(); err == nil {
		t.Error("the zero Kind is valid")
	}
}

// TestNewTable: the checks main runs on the table of kinds, each error
// naming the kind.
func TestNewTable(t *testing.T) {
	t.Parallel()
	named := func(name string) Kind {
		def := toyDef()
		def.Section.Kind = name
		return NewKind(def)
	}
	if _, err := NewTable(named("a"), named("b")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kinds []Kind
		want  string
	}{
		{[]Kind{named("web"), named("web")}, `kind "web" is in the table twice`},
		{[]Kind{named("defaults")}, `kind "defaults": the name is taken by the configuration file's defaults section`},
		{[]Kind{named("exporter")}, `kind "exporter": the name is taken by collect[]=exporter`},
		{[]Kind{named("Web")}, `kind "Web": kind name "Web" is not a lowercase word`},
		{[]Kind{named("a"), named("my kind")}, `kind "my kind": kind name "my kind" is not a lowercase word`},
		{[]Kind{named("ok"), {}}, `kind "": kind has no name`},
	} {
		if _, err := NewTable(tc.kinds...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewTable = %v, want %q", err, tc.want)
		}
	}
}

// TestKindReasonContracts: the reasons every kind can give (those the
// engine itself gives, and Ready), the shared reasons' up flags and
// one-word CamelCase reasons are checked, with the kind named; a set
// without the network's reasons, of a kind that dials nothing, is valid.
func TestKindReasonContracts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		reasons ReasonSet
		want    string
	}{
		{"no Timeout", ReasonSet{{ReasonReady, true}, {ReasonUnreachable, false}, {ReasonDNSFailed, false}, UnknownReason()},
			`kind "toy": reason set lacks Timeout, which every kind can give (start the set from EngineReasons()`},
		{"no Ready", ReasonSet{{ReasonTimeout, false}, UnknownReason()}, `reason set lacks Ready, which every kind can give`},
		{"Unreachable up", append(ReasonSet{{ReasonReady, true}, {ReasonTimeout, false}, {ReasonUnreachable, true}, {ReasonDNSFailed, false}}, UnknownReason()),
			`kind "toy": reason Unreachable must have up=false, as in every kind`},
		{"Unauthorized not up", append(EngineReasons(), ReasonDef{ReasonUnauthorized, false}, UnknownReason()),
			`reason Unauthorized must have up=true`},
		{"two words", append(EngineReasons(), ReasonDef{"Pool Full", true}, UnknownReason()), `reason "Pool Full" is not a CamelCase word`},
		{"lower case", append(EngineReasons(), ReasonDef{"poolFull", true}, UnknownReason()), `reason "poolFull" is not a CamelCase word`},
		{"Ready not up", append(append(ReasonSet{{ReasonReady, false}}, EngineReasons()[1:]...), UnknownReason()), `reason Ready must have up=true`},
	} {
		def := toyDef()
		def.Reasons = tc.reasons
		if err := NewKind(def).Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, set := range []ReasonSet{
		append(EngineReasons(), UnknownReason()),
		append(EngineReasons(), ReasonDef{reasonOptIn, true}, UnknownReason()),
		slices.Concat(EngineReasons(), NetworkReasons(), ReasonSet{UnknownReason()}),
	} {
		def := toyDef()
		def.Reasons = set
		if err := NewKind(def).Validate(); err != nil {
			t.Errorf("set %v: %v", set.Reasons(), err)
		}
	}
}

// TestReasonParts: the parts a kind composes its set from. The engine's
// part is what ReasonSet.Validate demands and no more; HTTPReasons starts
// with the engine's and the network's parts, in the order
// docs/metrics.md lists them.
func TestReasonParts(t *testing.T) {
	t.Parallel()
	if got, want := EngineReasons().Reasons(), []Reason{ReasonReady, ReasonTimeout}; !slices.Equal(got, want) {
		t.Errorf("EngineReasons = %v, want %v", got, want)
	}
	if got, want := NetworkReasons().Reasons(), []Reason{ReasonUnreachable, ReasonDNSFailed}; !slices.Equal(got, want) {
		t.Errorf("NetworkReasons = %v, want %v", got, want)
	}
	// Each reason of the engine's part is demanded.
	for i := range EngineReasons() {
		set := append(slices.Delete(EngineReasons(), i, i+1), UnknownReason())
		if err := set.Validate(); err == nil {
			t.Errorf("a set without %s is valid", EngineReasons()[i].Reason)
		}
	}
	head := slices.Concat(EngineReasons(), NetworkReasons())
	for _, set := range []ReasonSet{HTTPReasons(), AuthenticatedHTTPReasons()} {
		if !slices.Equal(set[:len(head)], head) {
			t.Errorf("%v does not start with the engine's and the network's reasons %v", set.Reasons(), head.Reasons())
		}
	}
}

// TestClassifierComposes: the docs' recipe, EngineReasons and a kind's own
// reasons with the TransportErrors classifier listed, gives a set that holds
// every reason the classifier returns, in front of Unknown, and an
// entry's set (EntryReasons) holds them too; a set that lacks them is an
// error naming the classifier and the reasons.
func TestClassifierComposes(t *testing.T) {
	t.Parallel()
	def := toyDef()
	def.Classifiers = []Classifier{TransportErrors}
	k := NewKind(def)
	if err := k.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, set := range []ReasonSet{k.Reasons(), k.EntryReasons(&toyEntry{}), k.EntryReasons(&toyEntry{Opt: true})} {
		for _, d := range TransportErrors.Reasons() {
			if !set.Contains(d.Reason) || set.Up(d.Reason) != d.Up {
				t.Errorf("set %v lacks %s (up=%v)", set.Reasons(), d.Reason, d.Up)
			}
		}
		if last := set[len(set)-1].Reason; last != ReasonUnknown {
			t.Errorf("set %v ends with %s, want Unknown", set.Reasons(), last)
		}
	}
	for _, set := range []ReasonSet{HTTPReasons(), AuthenticatedHTTPReasons()} {
		if got := set.With(TransportErrors); !slices.Equal(got, set) {
			t.Errorf("With changed a set that had every reason: %v", got.Reasons())
		}
	}
	// Only a kind that obtains credentials has CredentialsUnavailable:
	// every other reason of the two sets is the same, in the same order.
	if HTTPReasons().Contains(ReasonCredentialsUnavailable) {
		t.Errorf("HTTPReasons has CredentialsUnavailable, which an unauthenticated kind cannot give: %v", HTTPReasons().Reasons())
	}
	if got, want := AuthenticatedHTTPReasons().Without(ReasonCredentialsUnavailable), HTTPReasons(); !slices.Equal(got, want) {
		t.Errorf("AuthenticatedHTTPReasons less CredentialsUnavailable = %v, want %v", got.Reasons(), want.Reasons())
	}
	if i := slices.Index(AuthenticatedHTTPReasons().Reasons(), ReasonCredentialsUnavailable); i < 0 || AuthenticatedHTTPReasons()[i-1].Reason != ReasonTLSError {
		t.Errorf("CredentialsUnavailable is not after TLSError: %v", AuthenticatedHTTPReasons().Reasons())
	}
	err := TransportErrors.Within(slices.Concat(EngineReasons(), NetworkReasons(), ReasonSet{UnknownReason()}))
	if err == nil || !strings.Contains(err.Error(), "classifier provider.TransportErrors returns BadResponse, TLSError, which the reason set lacks") {
		t.Errorf("Within = %v", err)
	}
	flags := AuthenticatedHTTPReasons().Without(ReasonBadResponse)
	flags = append(flags, ReasonDef{ReasonBadResponse, false})
	if err := TransportErrors.Within(flags); err == nil || !strings.Contains(err.Error(), "BadResponse must have up=true") {
		t.Errorf("Within with a wrong up flag = %v", err)
	}
}

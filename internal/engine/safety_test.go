package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// bounded tells whether s is what BoundString makes of a provider string:
// valid UTF-8 of at most MaxProviderString bytes and its marker.
func bounded(s string) bool {
	return utf8.ValidString(s) && len(s) <= provider.MaxProviderString+64
}

// TestProviderStringsAreCut: a checker that returns and logs megabytes of
// a provider's text (not valid UTF-8 either) has it cut in the verdict,
// the status, the check's log and the engine's log, however the kind
// forgot to.
func TestProviderStringsAreCut(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("quota exceeded \xff", 4<<20/16)
	var engineLog bytes.Buffer
	c := &testChecker{targets: one("t"), behave: func(context.Context, string) provider.Verdict {
		return provider.Verdict{Reason: provider.ReasonForbidden, Message: huge}
	}}
	logging := &loggingChecker{testChecker: c, text: huge}
	e := NewEngine(slog.New(slog.NewTextHandler(&engineLog, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err := e.Load([]Entry{entry(ProviderGCP, "g", logging)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	got := runOne(t, e, Request{})
	if got.Reason != provider.ReasonForbidden || !bounded(got.Message) || !strings.Contains(got.Message, "[cut: ") {
		t.Errorf("verdict %s with a message of %d bytes (valid UTF-8: %v), want Forbidden, cut", got.Reason, len(got.Message), utf8.ValidString(got.Message))
	}
	if st := status(t, e); !bounded(st.Message) {
		t.Errorf("status message of %d bytes", len(st.Message))
	}
	if n := len(got.Log.String()); n > 8*provider.MaxProviderString {
		t.Errorf("check log of %d bytes for three lines", n)
	}
	if n := engineLog.Len(); n > 8*provider.MaxProviderString {
		t.Errorf("engine log of %d bytes for three lines", n)
	}
	if !strings.Contains(got.Log.String(), "[cut: ") {
		t.Errorf("check log has no cut marker:\n%.300s", got.Log.String())
	}
}

// loggingChecker logs a provider's text as a string, an error, bytes and
// in a group before it answers.
type loggingChecker struct {
	*testChecker
	text string
}

func (c *loggingChecker) Check(ctx context.Context, logger *slog.Logger, target string) provider.Verdict {
	logger.Debug("answer", "body", c.text, "err", errors.New(c.text), "raw", []byte(c.text))
	logger.Info(c.text, slog.Group("g", "reason", c.text))
	return c.testChecker.Check(ctx, logger, target)
}

// panickyFacts panic in Collect, after a first metric.
type panickyFacts struct{}

var testDesc = prometheus.NewDesc("provider_health_test_value", "A test value.", []string{"name", "target", "quota"}, nil)

func (panickyFacts) Collect(ch chan<- prometheus.Metric, name, target string) {
	ch <- provider.ConstMetric(testDesc, prometheus.GaugeValue, 1, name, target, "ok")
	panic("label value \"q\\xff\\xfe\" is not valid UTF-8")
}
func (panickyFacts) Details() map[string]string { panic("details of a broken answer") }

// TestFactsPanicIsTheTargetsUnknown: a provider whose metrics panic while
// built makes that target Unknown with the panic's text, in the scrape and
// on the status page; the other target keeps its verdict and its metrics,
// and nothing panics.
func TestFactsPanicIsTheTargetsUnknown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &testChecker{targets: []provider.Target{{Name: "bad"}, {Name: "good"}}, behave: func(_ context.Context, target string) provider.Verdict {
			if target == "bad" {
				return provider.Verdict{Reason: provider.ReasonReady, Message: "listed", Facts: panickyFacts{}}
			}
			return provider.Verdict{Reason: provider.ReasonReady, Facts: richFacts{3}}
		}}
		e := newTestEngine(t, entry(ProviderKubernetes, "k", c))
		text := scrapeText(t, e)
		for _, want := range []string{
			`provider_health_reason{name="k",provider="kubernetes",reason="Unknown",target="bad"} 1`,
			`provider_health_reason{name="k",provider="kubernetes",reason="Ready",target="good"} 1`,
			`provider_health_test_events_total{name="k",target="good"} 3`,
		} {
			if !strings.Contains(text, want+"\n") {
				t.Errorf("scrape lacks %s:\n%s", want, text)
			}
		}
		if strings.Contains(text, `provider_health_test_value`) {
			t.Errorf("the panicking target's metrics were exported:\n%s", text)
		}
		st, err := e.Status("k")
		if err != nil {
			t.Fatal(err)
		}
		bad := st[0].Targets[0]
		if bad.Reason != provider.ReasonUnknown || !strings.Contains(bad.Message, "panicked: label value") || !strings.Contains(bad.Message, "the check said Ready") {
			t.Errorf("status of the panicking target: %s %q", bad.Reason, bad.Message)
		}
	})
}

// panickyKeeper keeps facts that panic, for verdicts the engine makes up.
type panickyKeeper struct{ *testChecker }

func (panickyKeeper) Facts(string) provider.Facts { return panickyFacts{} }

// TestKeptFactsThatPanic: facts a FactKeeper gives a made-up verdict are
// collected at the scrape: a panic there makes the target Unknown in that
// scrape, and their details' panic is the status page's "error" detail.
func TestKeptFactsThatPanic(t *testing.T) {
	t.Parallel()
	c := panickyKeeper{&testChecker{targets: one("t"), behave: verdictOf(provider.ReasonReady)}}
	e := newTestEngine(t, entry(ProviderKVM, "lab", c))
	st, err := e.Status("")
	if err != nil {
		t.Fatal(err)
	}
	if d := Details(st[0].Targets[0].Facts); !strings.Contains(d["error"], "details of a broken answer") {
		t.Errorf("details %v, want the panic as error", d)
	}
	x, err := NewExposition(st)
	if err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("exposition error %v, want the panic", err)
	}
	var b bytes.Buffer
	if err := x.Write(&b, expfmt.NewFormat(expfmt.TypeTextPlain), nil, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `provider_health_reason{name="lab",provider="kvm",reason="Unknown",target="t"} 1`) {
		t.Errorf("target not Unknown:\n%s", b.String())
	}
}

// TestConstMetricNeverPanics: a label value that is not valid UTF-8 makes
// an invalid metric, which the exposition leaves out with a bounded error.
func TestConstMetricNeverPanics(t *testing.T) {
	t.Parallel()
	bad := "q\xff\xfe" + strings.Repeat("x", 1<<20)
	m := provider.ConstMetric(testDesc, prometheus.GaugeValue, 1, "k", "t", bad)
	var dm dto.Metric
	err := m.Write(&dm)
	if err == nil || !bounded(err.Error()) {
		t.Fatalf("Write: %v (%d bytes), want a bounded error", err, len(fmt.Sprint(err)))
	}
	res := []ProviderResult{{Provider: exposition.Provider{Kind: ProviderKubernetes, Name: "k", Reasons: testReasons()}, Targets: []TargetResult{
		{Series: exposition.Series{Result: exposition.Result{Verdict: provider.Verdict{Reason: provider.ReasonReady, Facts: badLabelFacts{bad}}, Target: provider.Target{Name: "t"}}}, Checked: true},
	}}}
	_, err = NewExposition(res)
	if err == nil || len(err.Error()) > 2*provider.MaxProviderString {
		t.Errorf("exposition error of %d bytes, want one, bounded", len(fmt.Sprint(err)))
	}
}

type badLabelFacts struct{ quota string }

func (f badLabelFacts) Collect(ch chan<- prometheus.Metric, name, target string) {
	for range 100 {
		ch <- provider.ConstMetric(testDesc, prometheus.GaugeValue, 1, name, target, f.quota)
	}
}
func (badLabelFacts) Details() map[string]string { return nil }

func TestDetailsAreBounded(t *testing.T) {
	t.Parallel()
	many := testFacts{}
	for i := range MaxDetails + 50 {
		many[fmt.Sprintf("quota q%03d pods", i)] = strings.Repeat("9", 1<<16)
	}
	d := Details(many)
	if len(d) != MaxDetails+1 || !strings.HasPrefix(d["…"], "50 more") {
		t.Errorf("%d details (… = %q), want %d and a count of the rest", len(d), d["…"], MaxDetails+1)
	}
	for k, v := range d {
		if !bounded(k) || !bounded(v) {
			t.Fatalf("detail %.20q of %d bytes", k, len(v))
		}
	}
	if Details(nil) != nil {
		t.Error("details of no facts")
	}
	// A key is cut as a label value is: 256 bytes and the marker.
	longKey := strings.Repeat("k", 1<<20)
	for k, v := range Details(testFacts{longKey: "v"}) {
		if len(k) > provider.MaxLabelValue+64 || !strings.Contains(k, "[cut: ") || v != "v" {
			t.Errorf("a key of 1 MiB became one of %d bytes (%.40q…)", len(k), k)
		}
	}
}

// TestBoundRecordCutsALoneError: a record whose only long part is an
// error attribute (no long string beside it) is cut too.
func TestBoundRecordCutsALoneError(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]any{
		"error": errors.New(strings.Repeat("e", 1<<20)),
		"bytes": []byte(strings.Repeat("b", 1<<20)),
	} {
		r := slog.NewRecord(time.Now(), slog.LevelDebug, "dial failed", 0)
		r.AddAttrs(slog.Any("err", v))
		out := boundRecord(r)
		out.Attrs(func(a slog.Attr) bool {
			if s := a.Value.String(); !bounded(s) || !strings.Contains(s, "[cut: ") {
				t.Errorf("%s of 1 MiB: attribute %s of %d bytes after boundRecord", name, a.Key, len(s))
			}
			return true
		})
	}
}

func TestCatchPanic(t *testing.T) {
	t.Parallel()
	err := provider.CatchPanic(func() error { panic(strings.Repeat("p", 1<<20)) })
	var pe *provider.PanicError
	if !errors.As(err, &pe) || !bounded(pe.Value) || pe.Stack == "" {
		t.Errorf("CatchPanic = %v, want a bounded *PanicError with a stack", err)
	}
	want := errors.New("plain")
	if err := provider.CatchPanic(func() error { return want }); err != want { //nolint:errorlint // the very error
		t.Errorf("CatchPanic = %v, want f's own error", err)
	}
}

// TestReloadDropsTheVerdictOfChangedSettings: an entry whose settings
// changed reads "not checked yet" until its next check, its history kept;
// an unchanged entry keeps its verdict.
func TestReloadDropsTheVerdictOfChangedSettings(t *testing.T) {
	t.Parallel()
	changed := entry(ProviderGCP, "g", &testChecker{targets: one("compute"), behave: verdictOf(provider.ReasonForbidden)})
	changed.Fingerprint = "regions: [us-central1]"
	same := entry(ProviderKVM, "lab", &testChecker{targets: one("h"), behave: verdictOf(provider.ReasonReady)})
	same.Fingerprint = "v1"
	e := newTestEngine(t, changed, same)
	if _, err := e.Run(context.Background(), Request{}); err != nil {
		t.Fatal(err)
	}
	changed2 := entry(ProviderGCP, "g", &testChecker{targets: one("compute"), behave: verdictOf(provider.ReasonReady)})
	changed2.Fingerprint = "regions: [europe-west4]"
	if err := e.Load([]Entry{changed2, same}); err != nil {
		t.Fatal(err)
	}
	st, err := e.Status("")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st {
		tr := p.Targets[0]
		switch p.Name {
		case "g":
			if tr.Checked || tr.Reason != "" || len(tr.Transitions) != 1 {
				t.Errorf("changed entry after reload: checked %v, %s, %d transitions; want not checked, history kept", tr.Checked, tr.Reason, len(tr.Transitions))
			}
		case "lab":
			if !tr.Checked || tr.Reason != provider.ReasonReady {
				t.Errorf("unchanged entry after reload: checked %v, %s; want its Ready", tr.Checked, tr.Reason)
			}
		}
	}
	if got := runOne(t, e, Request{Name: "g"}); got.Reason != provider.ReasonReady {
		t.Errorf("changed entry's next check: %s", got.Reason)
	}
}

// TestFingerprint: equal settings give equal fingerprints, any changed
// setting (deep in a host) another, and the fingerprint is a digest, not
// a copy of the entry.
func TestFingerprint(t *testing.T) {
	t.Parallel()
	mk := func(pool string) *fpEntry {
		return &fpEntry{Name: "lab", User: "u", Hosts: []*fpHost{{Address: "a:22", Name: "a"}, {Address: "b:22", Name: "b", Pool: pool}}}
	}
	a, b, c := fingerprint(mk("default")), fingerprint(mk("default")), fingerprint(mk("images"))
	if a != b || a == c || len(a) != 64 {
		t.Errorf("fingerprints %q %q %q: want the first two equal, the third other, 64 hex digits", a, b, c)
	}
	g1 := &fpEntry{Name: "g", Regions: []string{"us-central1"}, MinQuotaHeadroom: map[string]float64{"CPUS": 8}}
	g2 := &fpEntry{Name: "g", Regions: []string{"us-central1"}, MinQuotaHeadroom: map[string]float64{"CPUS": 9}}
	if fingerprint(g1) == fingerprint(g2) {
		t.Error("a changed minimum kept the fingerprint")
	}
}

// fpEntry is an entry with what a kind's entry holds (hosts behind
// pointers, a list, a map), for TestFingerprint: the kinds' own types are
// in packages that import this one.
type fpEntry struct {
	Name             string
	User             string
	Hosts            []*fpHost
	Regions          []string
	MinQuotaHeadroom map[string]float64
	config.Check
}

type fpHost struct{ Address, Name, Pool string }

func (e *fpEntry) EntryName() string          { return e.Name }
func (e *fpEntry) ResolvePaths(func(*string)) {}
func (e *fpEntry) Validate(string) error      { return nil }
func (e *fpEntry) TargetCount() int           { return len(e.Hosts) }

package engine

import (
	"bytes"
	"context"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// richFacts emits provider families of every kind the framework meets:
// a state set whose series come out of label order, a counter, an untyped
// value, a counter without _total, a family with a unit and one whose name
// needs quoting.
type richFacts struct{ v float64 }

var (
	richState   = prometheus.NewDesc("provider_health_test_state", "A \"state\" set\nwith a \\ in its help.", []string{"name", "target", "state"}, nil)
	richCounter = prometheus.NewDesc("provider_health_test_events_total", "Events.", []string{"name", "target"}, nil)
	richUntyped = prometheus.NewDesc("provider_health_test_untyped", "", []string{"target", "name"}, nil)
	richOdd     = prometheus.NewDesc("provider_health_test_odd", "A counter without _total.", []string{"name", "target"}, nil)
	richUnit    = prometheus.V2.NewDesc("provider_health_test_size_bytes", "Sized.", prometheus.UnconstrainedLabels{"name", "target"}, nil, prometheus.WithUnit("bytes"))
	richUTF8    = prometheus.NewDesc("provider_health.test.dotted", "Dotted.", []string{"name", "target"}, nil)
)

func (f richFacts) Collect(ch chan<- prometheus.Metric, name, target string) {
	for _, s := range []string{"running", "inactive", "degraded"} {
		v := 0.0
		if s == "inactive" {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(richState, prometheus.GaugeValue, v, name, target, s)
	}
	ch <- prometheus.MustNewConstMetric(richCounter, prometheus.CounterValue, f.v, name, target)
	ch <- prometheus.MustNewConstMetric(richUntyped, prometheus.UntypedValue, -f.v, target, name)
	ch <- prometheus.MustNewConstMetric(richOdd, prometheus.CounterValue, 3, name, target)
	ch <- prometheus.MustNewConstMetric(richUnit, prometheus.GaugeValue, 1e21, name, target)
	ch <- prometheus.MustNewConstMetric(richUTF8, prometheus.GaugeValue, math.Inf(-1), name, target)
}

func (richFacts) Details() map[string]string { return nil }

func richResults() []ProviderResult {
	at := time.Unix(1_700_000_000, 123_456_789)
	tr := func(name, addr string, r provider.Reason, d time.Duration, transition time.Time, facts provider.Facts) TargetResult {
		return TargetResult{
			Series: exposition.Series{
				Result: exposition.Result{Verdict: provider.Verdict{Reason: r, Facts: facts}, Target: provider.Target{Name: name, Address: addr},
					CheckedAt: at, Duration: d},
				LastTransition: transition,
			},
			Checked: true, Mode: exposition.ModeLive,
		}
	}
	withCapacity := func(tr TargetResult, n int64) TargetResult {
		tr.Capacity = provider.Capacity{Known: true, Proxies: n, Binding: "pool default"}
		return tr
	}
	withDomains := func(tr TargetResult, ds ...provider.Domain) TargetResult {
		tr.Domains = ds
		return tr
	}
	return []ProviderResult{
		{
			Provider: exposition.Provider{
				Kind: ProviderKVM, Name: "zeta", Reasons: testReasons(), Budget: 4500 * time.Millisecond,
				Checks: map[string]uint64{exposition.ModeLive: 7, exposition.ModeCached: 1 << 40},
			},
			Targets: []TargetResult{
				withCapacity(tr("nuc", "127.0.0.1:22", ReasonPoolInactive, 20*time.Millisecond, at, richFacts{1}), 0),
				withDomains(withCapacity(tr("a\"quoted\\name\nwith newline", "127.0.0.1:22", provider.ReasonReady, 0, time.Time{}, richFacts{2.5e-7}), provider.MaxCapacity),
					provider.Domain{Name: "zone-b", Capacity: provider.MaxCapacity, Proxies: 3, AfterLoss: -provider.MaxCapacity, HasAfterLoss: true},
					provider.Domain{Name: "a \"zone\"\nwith\\newline", Capacity: 0, Proxies: 0, AfterLoss: 0, HasAfterLoss: true},
					provider.Domain{Name: "ünïcode", Capacity: 7, Proxies: 1 << 40}),
				tr("ünïcode", "[::1]:22", provider.ReasonTimeout, 4500*time.Millisecond, at.Add(-time.Hour), richFacts{0}),
				tr("beelink", "127.0.0.2:22", provider.ReasonUnknown, time.Nanosecond, at, nil),
			},
		},
		{
			Provider: exposition.Provider{
				Kind: ProviderGCP, Name: "alpha", Reasons: testReasons(), Budget: time.Nanosecond,
				Checks: map[string]uint64{},
			},
			Targets: []TargetResult{withDomains(tr("compute", "projects/p", ReasonAPIDisabled, 250*time.Millisecond, at, nil),
				provider.Domain{Name: "us-central1", Capacity: 2, Proxies: 5, AfterLoss: -3, HasAfterLoss: true},
				provider.Domain{Name: "zone-b", Capacity: 40, Proxies: 0, AfterLoss: 37, HasAfterLoss: true})},
		},
		{Provider: exposition.Provider{Kind: ProviderKubernetes, Name: "empty", Reasons: testReasons(), Budget: time.Second, Checks: map[string]uint64{exposition.ModeShared: 2}}},
	}
}

// others are families gathered elsewhere whose names fall between the
// framework's, as the exporter's own do.
func others(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, name := range []string{"a_first", "provider_health_exporter_build_info", "provider_health_kvn", "zz_last"} {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "Other " + name + "."})
		g.Set(42)
		reg.MustRegister(g)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// TestExpositionIsWhatARegistryWrites pins the Exposition to the reference
// it replaces: ResultCollector gathered by a Registry with the other
// families and encoded by expfmt, byte for byte, in every format and
// escaping scheme expfmt knows.
func TestExpositionIsWhatARegistryWrites(t *testing.T) {
	t.Parallel()
	res := richResults()
	other := others(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(ResultCollector{Results: res})
	want, err := prometheus.Gatherers{prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return other, nil }), reg}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	x, err := NewExposition(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []expfmt.Format{
		expfmt.FmtText,
		expfmt.FmtText + "; escaping=underscores",
		expfmt.FmtText + "; escaping=allow-utf-8",
		expfmt.FmtText + "; escaping=values",
		expfmt.FmtOpenMetrics_1_0_0,
		expfmt.FmtOpenMetrics_1_0_0 + "; escaping=allow-utf-8",
		expfmt.FmtOpenMetrics_0_0_1 + "; escaping=underscores",
		expfmt.FmtOpenMetrics_2_0_0,
		expfmt.FmtProtoDelim,
		expfmt.FmtProtoDelim + "; escaping=allow-utf-8",
		expfmt.FmtProtoText,
		expfmt.FmtProtoCompact,
	} {
		var ref bytes.Buffer
		enc := expfmt.NewEncoder(&ref, f)
		for _, mf := range want {
			if err := enc.Encode(mf); err != nil {
				t.Fatalf("%s: reference: %v", f, err)
			}
		}
		if c, ok := enc.(expfmt.Closer); ok {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
		var got bytes.Buffer
		if err := x.Write(&got, f, other, nil); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if !bytes.Equal(got.Bytes(), ref.Bytes()) {
			t.Errorf("%s: the Exposition differs from the Registry's:\n%s", f, diffText(ref.String(), got.String()))
		}
	}
}

// diffText shows the first line where two texts differ.
func diffText(want, got string) string {
	w, g := bytes.Split([]byte(want), []byte("\n")), bytes.Split([]byte(got), []byte("\n"))
	for i := range min(len(w), len(g)) {
		if !bytes.Equal(w[i], g[i]) {
			return "line " + strconv.Itoa(i+1) + ":\nwant " + string(w[i]) + "\ngot  " + string(g[i])
		}
	}
	return "lengths differ: want " + strconv.Itoa(len(w)) + " lines, got " + strconv.Itoa(len(g))
}

func TestExpositionKeepsSelectedFamilies(t *testing.T) {
	t.Parallel()
	x, err := NewExposition(richResults())
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	keep := func(name string) bool { return name == "provider_health_up" || name == "zz_last" }
	if err := x.Write(&got, expfmt.FmtText, others(t), keep); err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(got.Bytes()), []byte("\n")) {
		if !bytes.Contains(line, []byte("provider_health_up")) && !bytes.Contains(line, []byte("zz_last")) {
			t.Errorf("unselected line %q", line)
		}
	}
}

// scrapeText runs every check of e and returns the answer in the text
// format, as /metrics writes it without the exporter's own families.
func scrapeText(t *testing.T, e *Engine) string {
	t.Helper()
	res, err := e.Run(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := NewExposition(res)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := x.Write(&b, expfmt.FmtText, nil, nil); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// countingFacts counts its Collect calls.
type countingFacts struct {
	richFacts
	calls *atomic.Int64
}

func (f countingFacts) Collect(ch chan<- prometheus.Metric, name, target string) {
	f.calls.Add(1)
	f.richFacts.Collect(ch, name, target)
}

// TestReusedVerdictsCollectFactsOnce: a verdict served again (min_interval)
// has its Facts collected at its first export only, and exports the same.
func TestReusedVerdictsCollectFactsOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		c := &testChecker{targets: []provider.Target{{Name: "b"}, {Name: "a"}}, behave: func(context.Context, string) provider.Verdict {
			return provider.Verdict{Reason: provider.ReasonReady, Facts: countingFacts{richFacts{2}, &calls}}
		}}
		en := entry(ProviderKVM, "lab", c)
		en.MinInterval = time.Hour
		e := newTestEngine(t, en)
		var outs []string
		for range 3 {
			outs = append(outs, strings.ReplaceAll(scrapeText(t, e), `mode="cached"`, ""))
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("Collect called %d times for 2 verdicts exported 3 times, want 2", n)
		}
		for _, o := range outs[1:] {
			if !strings.Contains(o, `provider_health_test_events_total{name="lab",target="a"} 2`) {
				t.Errorf("reused verdict lacks its facts:\n%s", o)
			}
		}
	})
}

// TestSameFactsAcrossChecksCollectedOnce: live checks that return the same
// Facts pointer as the check before have them collected once; checks that
// return new Facts have them collected again, however equal their values.
func TestSameFactsAcrossChecksCollectedOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var sameCalls, newCalls atomic.Int64
		same := &countingFacts{richFacts{2}, &sameCalls}
		v := 0.0
		c := &testChecker{targets: []provider.Target{{Name: "same"}, {Name: "new"}}, behave: func(_ context.Context, target string) provider.Verdict {
			if target == "same" {
				return provider.Verdict{Reason: provider.ReasonReady, Facts: same}
			}
			return provider.Verdict{Reason: provider.ReasonReady, Facts: &countingFacts{richFacts{v}, &newCalls}}
		}}
		e := newTestEngine(t, entry(ProviderKVM, "lab", c))
		for i := range 3 {
			v = float64(i)
			text := scrapeText(t, e)
			for _, want := range []string{
				`provider_health_test_events_total{name="lab",target="same"} 2`,
				`provider_health_test_events_total{name="lab",target="new"} ` + strconv.Itoa(i),
			} {
				if !strings.Contains(text, want+"\n") {
					t.Errorf("scrape %d lacks %s:\n%s", i, want, text)
				}
			}
		}
		if n := sameCalls.Load(); n != 1 {
			t.Errorf("the same Facts of 3 checks collected %d times, want 1", n)
		}
		if n := newCalls.Load(); n != 3 {
			t.Errorf("new Facts of 3 checks collected %d times, want 3", n)
		}
	})
}

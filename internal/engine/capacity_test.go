package engine

import (
	"context"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/egress-proxies/provider_health_exporter/internal/exposition"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

func TestCapacitySettle(t *testing.T) {
	t.Parallel()
	c := provider.Capacity{Known: true, Proxies: 4, Binding: "pool default"}
	zero := provider.Capacity{Known: true, Binding: "pool default"}
	for _, tc := range []struct {
		name    string
		c       provider.Capacity
		r       provider.Reason
		want    provider.Capacity
		wantErr bool
	}{
		{"ready keeps it", c, provider.ReasonReady, c, false},
		{"unknown stays unknown", provider.Capacity{}, provider.ReasonReady, provider.Capacity{}, false},
		{"a blocking reason fits none", c, ReasonPoolInactive, provider.Capacity{Known: true, Binding: "PoolInactive"}, false},
		{"zero keeps its binding", zero, ReasonPoolInactive, zero, false},
		{"timeout measured nothing", c, provider.ReasonTimeout, provider.Capacity{}, false},
		{"unknown measured nothing", c, provider.ReasonUnknown, provider.Capacity{}, false},
		{"ready with none is a bug", zero, provider.ReasonReady, provider.Capacity{}, true},
		{"negative is 0", provider.Capacity{Known: true, Proxies: -3, Binding: "x"}, provider.ReasonForbidden, provider.Capacity{Known: true, Binding: "x"}, false},
		{"too many is bounded", provider.Capacity{Known: true, Proxies: math.MaxInt64}, provider.ReasonReady, provider.Capacity{Known: true, Proxies: provider.MaxCapacity}, false},
		{"binding is cut", provider.Capacity{Known: true, Proxies: 1, Binding: strings.Repeat("x", 1000)}, provider.ReasonReady, provider.Capacity{Known: true, Proxies: 1, Binding: provider.BoundLabelString(strings.Repeat("x", 1000))}, false},
	} {
		got, msg := settleCapacity(tc.c, tc.r)
		if got != tc.want || (msg != "") != tc.wantErr {
			t.Errorf("%s: got %+v %q, want %+v (error %v)", tc.name, got, msg, tc.want, tc.wantErr)
		}
	}
}

// TestCapacitySeries runs verdicts with and without a capacity through the
// engine: the series is there exactly when a capacity is known, and
// agrees with ready.
func TestCapacitySeries(t *testing.T) {
	t.Parallel()
	verdicts := map[string]provider.Verdict{
		"fits":    {Reason: provider.ReasonReady, Capacity: provider.Capacity{Known: true, Proxies: 5, Binding: "pool default"}},
		"full":    {Reason: ReasonPoolInactive, Capacity: provider.Capacity{Known: true, Proxies: 5, Binding: "pool default"}},
		"none":    {Reason: provider.ReasonReady},
		"lying":   {Reason: provider.ReasonReady, Capacity: provider.Capacity{Known: true, Binding: "memory"}},
		"refused": {Reason: provider.ReasonUnreachable},
	}
	targets := []provider.Target{{Name: "fits"}, {Name: "full"}, {Name: "none"}, {Name: "lying"}, {Name: "refused"}}
	e := newTestEngine(t, entry(ProviderKVM, "lab", &testChecker{targets: targets, behave: func(_ context.Context, target string) provider.Verdict {
		return verdicts[target]
	}}))
	res, err := e.Run(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP provider_health_capacity ` + exposition.CapacityHelp + `
# TYPE provider_health_capacity gauge
provider_health_capacity{name="lab",provider="kvm",target="fits"} 5
provider_health_capacity{name="lab",provider="kvm",target="full"} 0
`
	if err := testutil.CollectAndCompare(ResultCollector{Results: res}, strings.NewReader(want), "provider_health_capacity"); err != nil {
		t.Error(err)
	}
	x, err := NewExposition(res)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := x.Write(&b, expfmt.NewFormat(expfmt.TypeTextPlain), nil, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), strings.TrimPrefix(want, "\n")) {
		t.Errorf("exposition lacks the capacity family:\n%s", b.String())
	}
	for _, tr := range res[0].Targets {
		if tr.Capacity.Known && (tr.Capacity.Proxies >= 1) != tr.Reason.Ready() {
			t.Errorf("%s: capacity %s with reason %s", tr.Target.Name, tr.Capacity, tr.Reason)
		}
	}
	if got := res[0].Targets[1].Capacity.Binding; got != "PoolInactive" {
		t.Errorf("full: binding %q, want the reason that blocks it", got)
	}
}

func TestDomainsSettle(t *testing.T) {
	t.Parallel()
	d := func(name string, c, p, loss int64, has bool) provider.Domain {
		return provider.Domain{Name: name, Capacity: c, Proxies: p, AfterLoss: loss, HasAfterLoss: has}
	}
	long := strings.Repeat("z", 1000)
	many := make([]provider.Domain, provider.MaxDomains+1)
	for i := range many {
		many[i] = d("zone-"+strconv.Itoa(i), 1, 1, 0, true)
	}
	for _, tc := range []struct {
		name    string
		ds      []provider.Domain
		r       provider.Reason
		want    []provider.Domain
		wantErr string
	}{
		{"none", nil, provider.ReasonReady, nil, ""},
		{"ready keeps them in order", []provider.Domain{d("b", 3, 2, -1, true), d("a", 0, 0, 0, false)}, provider.ReasonReady,
			[]provider.Domain{d("b", 3, 2, -1, true), d("a", 0, 0, 0, false)}, ""},
		{"not ready keeps the figures", []provider.Domain{d("b", 3, 2, -1, true)}, ReasonPoolInactive, []provider.Domain{d("b", 3, 2, -1, true)}, ""},
		{"timeout measured nothing", []provider.Domain{d("b", 3, 2, -1, true)}, provider.ReasonTimeout, nil, ""},
		{"unknown measured nothing", []provider.Domain{d("b", 3, 2, -1, true)}, provider.ReasonUnknown, nil, ""},
		{"figures clamped", []provider.Domain{d("lo", -5, -1, math.MinInt64, true), d("hi", math.MaxInt64, math.MaxInt64, math.MaxInt64, true)}, provider.ReasonReady,
			[]provider.Domain{d("lo", 0, 0, -provider.MaxCapacity, true), d("hi", provider.MaxCapacity, provider.MaxCapacity, provider.MaxCapacity, true)}, ""},
		{"after loss without HasAfterLoss is 0", []provider.Domain{d("a", 1, 1, 9, false)}, provider.ReasonReady, []provider.Domain{d("a", 1, 1, 0, false)}, ""},
		{"name bounded", []provider.Domain{d(long, 1, 1, 1, true)}, provider.ReasonReady, []provider.Domain{d(provider.BoundLabelString(long), 1, 1, 1, true)}, ""},
		{"empty name dropped", []provider.Domain{d("", 1, 1, 1, true), d("a", 1, 1, 1, true)}, provider.ReasonReady, []provider.Domain{d("a", 1, 1, 1, true)}, "1 domains without a name"},
		{"every repeat dropped", []provider.Domain{d("a", 1, 1, 1, true), d("b", 2, 2, 2, true), d("a", 3, 3, 3, true), d("a", 4, 4, 4, true)}, provider.ReasonReady,
			[]provider.Domain{d("b", 2, 2, 2, true)}, `named more than once dropped: "a"`},
		{"names repeated once bounded", []provider.Domain{d(long+"x", 1, 1, 1, true), d(long+"y", 1, 1, 1, true)}, provider.ReasonReady, nil, "named more than once"},
		{"all dropped is none", []provider.Domain{d("", 1, 1, 1, true)}, provider.ReasonReady, nil, "without a name"},
		{"exactly the bound kept", many[:provider.MaxDomains], provider.ReasonReady, many[:provider.MaxDomains], ""},
		{"past the bound all dropped", many, provider.ReasonReady, nil, "65 domains, more than the 64"},
	} {
		in := slices.Clone(tc.ds)
		got, msg := settleDomains(tc.ds, tc.r)
		if !slices.Equal(got, tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
		if (msg == "") != (tc.wantErr == "") || !strings.Contains(msg, tc.wantErr) {
			t.Errorf("%s: problem %q, want one with %q", tc.name, msg, tc.wantErr)
		}
		if !slices.Equal(in, tc.ds) {
			t.Errorf("%s: the provider's domains were written to", tc.name)
		}
	}
}

// TestDomainSeries runs verdicts with domains through the engine: series
// only for the targets with domains, after-loss only where the kind said
// it, none after a Timeout, and a provider's bug logged in the check's log.
func TestDomainSeries(t *testing.T) {
	t.Parallel()
	zones := []provider.Domain{
		{Name: "zone-b", Capacity: 12, Proxies: 5, AfterLoss: -3, HasAfterLoss: true},
		{Name: "zone-a", Capacity: 40, Proxies: 5, AfterLoss: 7, HasAfterLoss: true},
	}
	verdicts := map[string]provider.Verdict{
		"zoned":   {Reason: provider.ReasonReady, Capacity: provider.Capacity{Known: true, Proxies: 52, Binding: "nodes"}, Domains: zones},
		"rack":    {Reason: ReasonPoolInactive, Domains: []provider.Domain{{Name: "rack-a", Capacity: 3, Proxies: 2, AfterLoss: 99}}},
		"plain":   {Reason: provider.ReasonReady},
		"slow":    {Reason: provider.ReasonTimeout, Domains: zones},
		"buggy":   {Reason: provider.ReasonReady, Domains: []provider.Domain{{Name: "x", Capacity: 1}, {Name: "x", Capacity: 2}, {Name: "y", Capacity: 3}}},
		"invalid": {Reason: "NoSuchReason", Domains: zones},
	}
	var targets []provider.Target
	for _, n := range slices.Sorted(maps.Keys(verdicts)) {
		targets = append(targets, provider.Target{Name: n})
	}
	e := newTestEngine(t, entry(ProviderKVM, "lab", &testChecker{targets: targets, behave: func(_ context.Context, target string) provider.Verdict {
		return verdicts[target]
	}}))
	res, err := e.Run(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP provider_health_capacity_after_loss ` + exposition.AfterLossHelp + `
# TYPE provider_health_capacity_after_loss gauge
provider_health_capacity_after_loss{domain="zone-a",name="lab",provider="kvm",target="zoned"} 7
provider_health_capacity_after_loss{domain="zone-b",name="lab",provider="kvm",target="zoned"} -3
# HELP provider_health_domain_capacity ` + exposition.DomainCapacityHelp + `
# TYPE provider_health_domain_capacity gauge
provider_health_domain_capacity{domain="rack-a",name="lab",provider="kvm",target="rack"} 3
provider_health_domain_capacity{domain="y",name="lab",provider="kvm",target="buggy"} 3
provider_health_domain_capacity{domain="zone-a",name="lab",provider="kvm",target="zoned"} 40
provider_health_domain_capacity{domain="zone-b",name="lab",provider="kvm",target="zoned"} 12
# HELP provider_health_domain_proxies ` + exposition.DomainProxiesHelp + `
# TYPE provider_health_domain_proxies gauge
provider_health_domain_proxies{domain="rack-a",name="lab",provider="kvm",target="rack"} 2
provider_health_domain_proxies{domain="y",name="lab",provider="kvm",target="buggy"} 0
provider_health_domain_proxies{domain="zone-a",name="lab",provider="kvm",target="zoned"} 5
provider_health_domain_proxies{domain="zone-b",name="lab",provider="kvm",target="zoned"} 5
`
	families := []string{"provider_health_capacity_after_loss", "provider_health_domain_capacity", "provider_health_domain_proxies"}
	if err := testutil.CollectAndCompare(ResultCollector{Results: res}, strings.NewReader(want), families...); err != nil {
		t.Error(err)
	}
	x, err := NewExposition(res)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := x.Write(&b, expfmt.NewFormat(expfmt.TypeTextPlain), nil, func(name string) bool { return slices.Contains(families, name) }); err != nil {
		t.Fatal(err)
	}
	if b.String() != strings.TrimPrefix(want, "\n") {
		t.Errorf("exposition's domain families:\n%s\nwant:\n%s", b.String(), want)
	}
	for _, tr := range res[0].Targets {
		log := tr.Log.String()
		bug := strings.Contains(log, "checker returned domains the engine cannot export")
		if wantBug := tr.Target.Name == "buggy"; bug != wantBug {
			t.Errorf("%s: error logged %v, want %v:\n%s", tr.Target.Name, bug, wantBug, log)
		}
	}
	if zones[0].Name != "zone-b" || len(verdicts["buggy"].Domains) != 3 {
		t.Errorf("the checker's domains were changed: %+v", zones)
	}
}

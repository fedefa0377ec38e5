package engine

import (
	"context"
	"math"
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

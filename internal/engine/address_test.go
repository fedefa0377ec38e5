package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestAddressesAreRedacted: an address with userinfo or query values, from
// Targets or from a verdict, reaches Run, Status and target_info without
// them.
func TestAddressesAreRedacted(t *testing.T) {
	t.Parallel()
	fromVerdict := &testChecker{
		targets: []provider.Target{{Name: "api", Address: "https://admin:pw1@api.example:6443/?token=tok1"}},
		behave: func(context.Context, string) provider.Verdict {
			return provider.Verdict{Reason: provider.ReasonReady, Address: "https://admin:pw2@moved.example:6443/x?sig=tok2#f"}
		},
	}
	configured := &testChecker{
		targets: []provider.Target{{Name: "api", Address: "https://admin:pw3@api.example:6443/?token=tok3"}},
		behave:  verdictOf(provider.ReasonUnreachable),
	}
	e := newTestEngine(t, entry(ProviderKubernetes, "moved", fromVerdict), entry(ProviderKubernetes, "kept", configured))
	st, _ := e.Status("kept")
	if got := st[0].Targets[0].Target.Address; got != "https://api.example:6443/?token=xxxxx" {
		t.Errorf("address before a check: %q", got)
	}
	res, err := e.Run(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"moved": "https://moved.example:6443/x?sig=xxxxx", "kept": "https://api.example:6443/?token=xxxxx"}
	for _, p := range res {
		if got := p.Targets[0].Target.Address; got != want[p.Name] {
			t.Errorf("Run: %s address %q, want %q", p.Name, got, want[p.Name])
		}
	}
	st, _ = e.Status("")
	var text strings.Builder
	for _, p := range st {
		if got := p.Targets[0].Target.Address; got != want[p.Name] {
			t.Errorf("Status: %s address %q, want %q", p.Name, got, want[p.Name])
		}
	}
	x, err := NewExposition(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Write(&text, expfmt.NewFormat(expfmt.TypeTextPlain), nil, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), `address="https://moved.example:6443/x?sig=xxxxx"`) {
		t.Errorf("target_info lacks the redacted address:\n%s", text.String())
	}
	for _, secret := range []string{"pw1", "pw2", "pw3", "tok1", "tok2", "tok3", "admin"} {
		if strings.Contains(text.String(), secret) {
			t.Errorf("the metrics show %s:\n%s", secret, text.String())
		}
	}
}

package kubernetes

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// BenchmarkCheck measures one live check against a loopback API server
// (TLS, a new connection per check, as in production): the list call alone,
// which a configuration without pod_template makes exactly as before, and
// with pod_template's dry run. requests/check is what the API server saw.
func BenchmarkCheck(b *testing.B) {
	for _, bc := range []struct {
		name     string
		template bool
	}{{"list", false}, {"list+pod_template", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var requests atomic.Int64
			post := admit("")
			srv := newAPIServer(b, true, func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				if r.Method == http.MethodPost {
					post(w, r)
					return
				}
				writePodList(w)
			})
			cfg := &Entry{Name: "bench", Kubeconfig: kubeconfig(b, srv.URL, srv.caPEM(), nil), LabelSelector: testSelector}
			if bc.template {
				cfg.Namespace, cfg.PodTemplate = headroomNamespace, writeTemplate(b, testTemplate)
			}
			c, err := New(cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			logger := slog.New(slog.DiscardHandler)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if v := c.Check(context.Background(), logger, TargetName); v.Reason != provider.ReasonReady {
					b.Fatalf("%s: %s", v.Reason, v.Message)
				}
			}
			b.ReportMetric(float64(requests.Load())/float64(b.N), "requests/check")
		})
	}
}

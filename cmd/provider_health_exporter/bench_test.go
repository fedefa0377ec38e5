package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// BenchmarkScrape measures one /metrics scrape through the real handler with
// instant checkers: the exporter's own overhead per scrape, by target count.
func BenchmarkScrape(b *testing.B) {
	for _, hosts := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("kvm_hosts=%d", hosts), func(b *testing.B) {
			var cfg strings.Builder
			cfg.WriteString("kvm:\n  - name: lab\n    user: u\n    private_key_file: placeholder\n    insecure_ignore_host_key: true\n    hosts:\n")
			for i := range hosts {
				fmt.Fprintf(&cfg, "      - address: 127.0.0.1:%d\n", 10000+i)
				fmt.Fprintf(&cfg, "        name: h%d\n", i)
			}
			_, srv, _ := newTestExporterWith(b, b.TempDir(), cfg.String(), nil, 0)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := http.Get(srv.URL + "/metrics")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}

// BenchmarkServeMetrics serves /metrics through the real handler, called
// in process with a response writer that discards the body, so that what
// it measures is the exporter's framework alone: the engine, the metrics
// of the answer and their encoding, for checks that cost nothing. An op is
// one scrape of a KVM entry whose hosts all answer Ready at once with the
// facts a kvm check has. Modes: live (every host checked, min_interval 0)
// and cached (min_interval 1h: no check runs, every verdict is reused).
// It reports bytes/scrape and cpu-ms/scrape (getrusage: the process's CPU,
// which here is the handler's and the checks' goroutines').
func BenchmarkServeMetrics(b *testing.B) {
	formats := []struct{ name, accept, encoding string }{
		{"text", "text/plain;version=0.0.4", ""},
		{"openmetrics", "application/openmetrics-text;version=1.0.0", ""},
	}
	for _, hosts := range []int{1, 100, 1000} {
		for _, mode := range []string{"cached", "live"} {
			for _, f := range formats {
				b.Run(fmt.Sprintf("hosts=%d/%s/%s", hosts, mode, f.name), func(b *testing.B) {
					benchServeMetrics(b, hosts, mode == "cached", f.accept, f.encoding, false)
				})
			}
		}
	}
	// What Prometheus asks for by default: compressed, and the protobuf
	// format of native histograms' users.
	b.Run("hosts=1000/live/text+gzip", func(b *testing.B) {
		benchServeMetrics(b, 1000, false, "text/plain;version=0.0.4", "gzip", false)
	})
	b.Run("hosts=1000/live/protobuf", func(b *testing.B) {
		benchServeMetrics(b, 1000, false, "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", "", false)
	})
	// Every host in a rack of ten (a KVM host's domain): two more series
	// per host (docs/metrics.md: "Capacity per failure domain").
	b.Run("hosts=1000/cached/text/domains", func(b *testing.B) {
		benchServeMetrics(b, 1000, true, "text/plain;version=0.0.4", "", true)
	})
}

func benchServeMetrics(b *testing.B, hosts int, cached bool, accept, encoding string, domains bool) {
	var cfg strings.Builder
	cfg.WriteString("kvm:\n  - name: fleet\n    user: proxyops\n    private_key_file: placeholder\n    insecure_ignore_host_key: true\n")
	if cached {
		cfg.WriteString("    min_interval: 1h\n")
	}
	cfg.WriteString("    hosts:\n")
	for i := range hosts {
		fmt.Fprintf(&cfg, "      - address: 127.0.0.1:%d\n        name: h%04d\n", 10000+i, i)
	}
	x, _, _ := newTestExporterWith(b, b.TempDir(), cfg.String(), map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"fleet": func(_ context.Context, _ *slog.Logger, target string) provider.Verdict {
			v := provider.Verdict{Reason: provider.ReasonReady, Facts: &kvm.Facts{
				User: "proxyops", LibvirtVersion: "9.0.0", Pool: "default", PoolState: "running",
				CapacityBytes: 107374182400, AllocationBytes: 21474836480, AvailableBytes: 85899345920, Connects: 1}}
			if domains {
				v.Domains = []provider.Domain{{Name: "rack-" + target[len(target)-1:], Capacity: 20, Proxies: 3}}
			}
			return v
		},
	}, 0)
	h := x.handler()
	scrape := func() int64 {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.Header.Set(engine.ScrapeTimeoutHeader, "5")
		r.Header.Set("Accept", accept)
		if encoding != "" {
			r.Header.Set("Accept-Encoding", encoding)
		}
		w := &discardResponse{header: http.Header{}}
		h.ServeHTTP(w, r)
		if w.code != 0 && w.code != http.StatusOK {
			b.Fatalf("status %d", w.code)
		}
		return w.n
	}
	scrape() // the first verdicts: what cached mode reuses
	var bytes int64
	cpu := cpuTime()
	for b.Loop() {
		bytes += scrape()
	}
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/scrape")
	b.ReportMetric((cpuTime()-cpu).Seconds()*1000/float64(b.N), "cpu-ms/scrape")
}

// discardResponse is an http.ResponseWriter that counts the body and drops it.
type discardResponse struct {
	header http.Header
	code   int
	n      int64
}

func (w *discardResponse) Header() http.Header { return w.header }
func (w *discardResponse) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *discardResponse) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// cpuTime is the CPU time (user + system) of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

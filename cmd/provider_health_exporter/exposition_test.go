//go:build promtool

// TestExpositionFormats runs promtool of Prometheus 2.42 (Debian's) and 3
// (testdata/prometheus/build-prometheus.sh): make test runs it with
// -tags promtool, so that make unit needs neither.

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Scrape protocols and the Accept values Prometheus 3 builds from them
// (config.ScrapeProtocolsHeaders and acceptHeader in scrape/scrape.go of
// github.com/prometheus/prometheus v0.316.0, i.e. Prometheus 3.16.0).
const (
	acceptProto        = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
	acceptOpenMetrics1 = "application/openmetrics-text;version=1.0.0"
	acceptOpenMetrics0 = "application/openmetrics-text;version=0.0.1"
	acceptText1        = "text/plain;version=1.0.0"
	acceptText0        = "text/plain;version=0.0.4"
)

// prometheus3Accept is acceptHeader of Prometheus 3: each protocol in order
// of preference with a falling q, the newer text formats with the escaping
// scheme (allow-utf-8 under Prometheus 3's default UTF-8 name validation),
// and */* last.
func prometheus3Accept(protocols ...string) string {
	var vals []string
	weight := 7 // len(ScrapeProtocolsHeaders) + 1 in Prometheus 3.16
	for _, p := range protocols {
		v := p
		if p == acceptText1 || p == acceptOpenMetrics1 {
			v += ";escaping=allow-utf-8"
		}
		vals = append(vals, fmt.Sprintf("%s;q=0.%d", v, weight))
		weight--
	}
	return strings.Join(append(vals, fmt.Sprintf("*/*;q=0.%d", weight)), ",")
}

// TestExpositionFormats scrapes /metrics and /probe with every Accept header
// Prometheus 3 sends (each scrape protocol alone, the default list and the
// protobuf-first list) and the one Prometheus 2.42 sends, and checks the
// negotiated format and that the body is valid in it: text bodies and the
// re-encoded OpenMetrics and protobuf bodies go through `promtool check
// metrics` of every promtool at hand.
func TestExpositionFormats(t *testing.T) {
	t.Parallel()
	promtools := promtoolBinaries(t)
	_, srv, _ := newTestExporter(t, baseConfig, map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"crawl-prod": fixed(provider.ReasonRateLimited, "quota"),
		"lab": func(context.Context, *slog.Logger, string) provider.Verdict {
			// Failure domains, a negative after-loss and one without
			// (docs/metrics.md: "Capacity per failure domain").
			return provider.Verdict{Reason: provider.ReasonReady, Facts: &kvm.Facts{
				User: "proxyops", LibvirtVersion: "9.0.0", Pool: "default", PoolState: "running",
				CapacityBytes: 100, AllocationBytes: 20, AvailableBytes: 80, Connects: 1},
				Domains: []provider.Domain{{Name: "zone-a", Capacity: 12, Proxies: 5, AfterLoss: -3, HasAfterLoss: true},
					{Name: `rack "b"`, Capacity: 1, Proxies: 2}}}
		},
	}, 0)

	for _, tc := range []struct {
		name   string
		accept string
		// media type and version parameter of the answer
		mediaType, version string
	}{
		{"PrometheusProto", prometheus3Accept(acceptProto), "application/vnd.google.protobuf", ""},
		{"OpenMetricsText1.0.0", prometheus3Accept(acceptOpenMetrics1), "application/openmetrics-text", "1.0.0"},
		{"OpenMetricsText0.0.1", prometheus3Accept(acceptOpenMetrics0), "application/openmetrics-text", "0.0.1"},
		// client_golang does not write text 1.0.0; Prometheus 3 takes the
		// 0.0.4 it falls back to, as with every other exporter.
		{"PrometheusText1.0.0", prometheus3Accept(acceptText1), "text/plain", "0.0.4"},
		{"PrometheusText0.0.4", prometheus3Accept(acceptText0), "text/plain", "0.0.4"},
		{"Prometheus3Default", prometheus3Accept(acceptOpenMetrics1, acceptOpenMetrics0, acceptText1, acceptText0), "application/openmetrics-text", "1.0.0"},
		{"Prometheus3ProtoFirst", prometheus3Accept(acceptProto, acceptOpenMetrics1, acceptOpenMetrics0, acceptText1, acceptText0), "application/vnd.google.protobuf", ""},
		{"Prometheus2.42", "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1", "application/openmetrics-text", "1.0.0"},
		{"NoAccept", "", "text/plain", "0.0.4"},
	} {
		for _, path := range []string{"/metrics", "/probe?name=lab"} {
			t.Run(tc.name+path, func(t *testing.T) {
				t.Parallel()
				req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				if tc.accept != "" {
					req.Header.Set("Accept", tc.accept)
				}
				req.Header.Set(engine.ScrapeTimeoutHeader, "10")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var body bytes.Buffer
				if _, err := body.ReadFrom(resp.Body); err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, body.String())
				}
				ct := resp.Header.Get("Content-Type")
				mt, params, err := mime.ParseMediaType(ct)
				if err != nil {
					t.Fatalf("Content-Type %q: %v", ct, err)
				}
				if mt != tc.mediaType || params["version"] != tc.version {
					t.Fatalf("Accept %q got Content-Type %q, want %s version %q", tc.accept, ct, tc.mediaType, tc.version)
				}

				// Decode in the negotiated format; the text formats are also
				// checked as served.
				text := body.String()
				if mt != "text/plain" {
					text = reencode(t, &body, expfmt.Format(ct))
				} else if !strings.Contains(text, "# TYPE provider_health_ready gauge") {
					t.Errorf("text body lacks provider_health_ready:\n%s", text)
				}
				if !strings.Contains(text, `provider_health_capacity_after_loss{domain="zone-a",name="lab",provider="kvm",target=`) {
					t.Errorf("body lacks the domain families:\n%s", text)
				}
				if mt == "application/openmetrics-text" && !strings.HasSuffix(body.String(), "# EOF\n") {
					t.Errorf("OpenMetrics body does not end with # EOF")
				}
				for _, promtool := range promtools {
					cmd := exec.Command(promtool, "check", "metrics")
					cmd.Stdin = strings.NewReader(text)
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Errorf("%s check metrics: %v\n%s", promtool, err, out)
					}
				}
			})
		}
	}
}

// reencode decodes a body in format f (the Content-Type as served) and
// writes it in the text format, failing on anything f's decoder refuses.
func reencode(t *testing.T, body *bytes.Buffer, f expfmt.Format) string {
	t.Helper()
	var out bytes.Buffer
	enc := expfmt.NewEncoder(&out, expfmt.NewFormat(expfmt.TypeTextPlain))
	n := 0
	if f.FormatType() == expfmt.TypeOpenMetrics {
		// expfmt has no OpenMetrics decoder; promtool's text parser reads
		// the OpenMetrics body except its # EOF, # UNIT and counter family
		// names without _total, so it is checked as text after those.
		return openMetricsAsText(t, body.String())
	}
	dec := expfmt.NewDecoder(body, f)
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decode %s: %v", f, err)
		}
		n++
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatalf("no metric family in the %s body", f)
	}
	return out.String()
}

// promtoolBinaries returns Debian's promtool (Prometheus 2.42) and
// Prometheus 3's, whose path is in PHE_PROMTOOL3: make exposition sets it
// to what testdata/prometheus/build-prometheus.sh, the one place that
// names the Prometheus 3 release, builds and prints. Without either the
// test fails: checking with one promtool is not what it claims.
func promtoolBinaries(t *testing.T) []string {
	t.Helper()
	p2, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian's prometheus package (.ci/run does)")
	}
	p3 := os.Getenv("PHE_PROMTOOL3")
	if p3 == "" {
		t.Fatal("PHE_PROMTOOL3 is not set: run make exposition, or set it to the promtool path testdata/prometheus/build-prometheus.sh prints (its second line)")
	}
	if _, err := os.Stat(p3); err != nil {
		t.Fatalf("PHE_PROMTOOL3: %v", err)
	}
	return []string{p2, p3}
}

// openMetricsAsText rewrites an OpenMetrics body into the text format
// promtool reads: counter families are named with their _total suffix
// again, and the # EOF and # UNIT lines, which the text format lacks, go.
// A body that is not OpenMetrics as client_golang writes it fails.
func openMetricsAsText(t *testing.T, body string) string {
	t.Helper()
	if !strings.HasSuffix(body, "# EOF\n") {
		t.Fatalf("OpenMetrics body does not end with # EOF:\n%s", body)
	}
	// A family is a counter when its TYPE line says so; its HELP line is
	// the one just before. Go's collector has a gauge and a counter that
	// share a name in OpenMetrics (go_memstats_alloc_bytes and ..._total),
	// so the name alone does not tell.
	lines := strings.Split(strings.TrimSuffix(body, "# EOF\n"), "\n")
	isCounterType := func(line string) bool {
		f := strings.Fields(line)
		return len(f) == 4 && f[0] == "#" && f[1] == "TYPE" && f[3] == "counter"
	}
	var out []string
	for i, line := range lines {
		f := strings.SplitN(line, " ", 4)
		switch {
		case line == "" || strings.HasPrefix(line, "# UNIT "):
			continue
		case len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" && isCounterType(line),
			len(f) >= 3 && f[0] == "#" && f[1] == "HELP" && i+1 < len(lines) && isCounterType(lines[i+1]) && strings.Fields(lines[i+1])[2] == f[2]:
			f[2] += "_total"
			line = strings.Join(f, " ")
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n") + "\n"
}

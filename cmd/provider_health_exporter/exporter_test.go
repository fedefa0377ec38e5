package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/egress-proxies/provider_health_exporter/collector/gcp"
	"github.com/egress-proxies/provider_health_exporter/collector/kubernetes"
	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// fakeChecker answers what its behave function says, for the HTTP layer's
// tests; the providers have their own tests against real servers.
type fakeChecker struct {
	targets []provider.Target
	behave  func(ctx context.Context, logger *slog.Logger, target string) provider.Verdict
}

func (c *fakeChecker) Targets() []provider.Target { return c.targets }

func (c *fakeChecker) Check(ctx context.Context, logger *slog.Logger, target string) provider.Verdict {
	return c.behave(ctx, logger, target)
}

func fixed(r provider.Reason, msg string) func(context.Context, *slog.Logger, string) provider.Verdict {
	return func(_ context.Context, logger *slog.Logger, _ string) provider.Verdict {
		logger.Debug("fake check ran", "reason", r)
		return provider.Verdict{Reason: r, Message: msg}
	}
}

// fakeEntries gives each configured entry a fakeChecker; behaviours picks
// one by entry name (default Ready). It goes through the kinds table, so
// names, reason sets and fingerprints are the real ones.
func fakeEntries(behaviours map[string]func(context.Context, *slog.Logger, string) provider.Verdict) entriesFunc {
	return func(cfg *config.Config, logger *slog.Logger) []engine.Entry {
		es := entries(cfg, logger)
		for i := range es {
			b := behaviours[es[i].Name]
			if b == nil {
				b = fixed(provider.ReasonReady, "")
			}
			var targets []provider.Target
			switch es[i].Kind {
			case kubernetes.Name:
				targets = []provider.Target{{Name: "apiserver", Address: "https://127.0.0.1:6443"}}
			case gcp.Name:
				for _, g := range config.EntriesOf[*gcp.Entry](cfg, gcp.Name) {
					if g.Name == es[i].Name {
						targets = []provider.Target{{Name: "compute", Address: "projects/" + g.Project}}
					}
				}
			case kvm.Name:
				for _, v := range config.EntriesOf[*kvm.Entry](cfg, kvm.Name) {
					if v.Name == es[i].Name {
						for _, h := range v.Hosts {
							targets = append(targets, provider.Target{Name: h.Name, Address: h.Address})
						}
					}
				}
			}
			es[i].Build = func() (provider.Checker, error) { return &fakeChecker{targets: targets, behave: b}, nil }
		}
		return es
	}
}

const baseConfig = `
gcp:
  - name: crawl-prod
    project: crawl-prod-123
kubernetes:
  - name: prod-cluster
    kubeconfig: placeholder
kvm:
  - name: lab
    user: proxyops
    private_key_file: placeholder
    known_hosts_file: placeholder
    hosts:
      - address: 127.0.0.1:2222
        name: beelink
      - address: 127.0.0.1:2223
        name: nuc
`

func writeConfig(t testing.TB, dir, body string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "placeholder"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "provider_health.yml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newTestExporter(t *testing.T, body string, behaviours map[string]func(context.Context, *slog.Logger, string) provider.Verdict, maxRequests int) (*exporter, *httptest.Server, string) {
	t.Helper()
	return newTestExporterWith(t, t.TempDir(), body, behaviours, maxRequests)
}

func newTestExporterWith(t testing.TB, dir, body string, behaviours map[string]func(context.Context, *slog.Logger, string) provider.Verdict, maxRequests int) (*exporter, *httptest.Server, string) {
	t.Helper()
	path := writeConfig(t, dir, body)
	x := newExporter(exporterOptions{
		logger:      slog.New(slog.DiscardHandler),
		configFile:  path,
		entries:     fakeEntries(behaviours),
		offset:      500 * time.Millisecond,
		maxRequests: maxRequests,
		metricsPath: "/metrics",
	})
	if err := x.reload(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(x.handler())
	t.Cleanup(func() {
		srv.Close()
		x.engine.Close()
	})
	return x, srv, path
}

// newBubbleExporter is an exporter for a synctest bubble, with the
// fake checkers of behaviours: it has no HTTP server (a goroutine waiting
// on the network is not durably blocked, so fake time would not advance);
// the test serves x.handler() itself and closes x.engine.
func newBubbleExporter(t *testing.T, behaviours map[string]func(context.Context, *slog.Logger, string) provider.Verdict) *exporter {
	t.Helper()
	x := newExporter(exporterOptions{
		logger:      slog.New(slog.DiscardHandler),
		configFile:  writeConfig(t, t.TempDir(), baseConfig),
		entries:     fakeEntries(behaviours),
		offset:      500 * time.Millisecond,
		metricsPath: "/metrics",
	})
	if err := x.reload(); err != nil {
		t.Fatal(err)
	}
	return x
}

func get(t *testing.T, client *http.Client, url string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestScrapeAnswersBeforeScrapeTimeoutWhenACheckerHangs: a checker that
// ignores its context does not hold the answer past Prometheus' scrape
// timeout; its target reads Timeout and the others keep their verdicts. In
// a synctest bubble, so the time measured is the exporter's own waiting, not
// how fast a loaded machine runs it.
func TestScrapeAnswersBeforeScrapeTimeoutWhenACheckerHangs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		x := newBubbleExporter(t, map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
			"crawl-prod": func(context.Context, *slog.Logger, string) provider.Verdict {
				<-release // never returns during the scrape, ignoring its context
				return provider.Verdict{Reason: provider.ReasonReady}
			},
		})
		defer x.engine.Close()
		defer close(release)
		// Prometheus gives up after its scrape timeout, the header's 1 s.
		const scrapeTimeout = time.Second
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.Header.Set(engine.ScrapeTimeoutHeader, "1")
		w := httptest.NewRecorder()
		begin := time.Now()
		x.handler().ServeHTTP(w, r)
		if took := time.Since(begin); took >= scrapeTimeout {
			t.Errorf("answered after %v, want it within the scrape timeout of %v", took, scrapeTimeout)
		}
		body := w.Body.String()
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, body)
		}
		for _, want := range []string{
			`provider_health_reason{name="crawl-prod",provider="gcp",reason="Timeout",target="compute"} 1`,
			`provider_health_check_timeout_seconds{name="crawl-prod",provider="gcp"} 0.5`,
			`provider_health_ready{name="prod-cluster",provider="kubernetes",target="apiserver"} 1`,
			`provider_health_ready{name="lab",provider="kvm",target="nuc"} 1`,
			`provider_health_exporter_build_info{`,
			`go_goroutines `,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func TestBadScrapeTimeoutHeader(t *testing.T) {
	t.Parallel()
	_, srv, _ := newTestExporter(t, baseConfig, nil, 0)
	code, body := get(t, http.DefaultClient, srv.URL+"/metrics", map[string]string{engine.ScrapeTimeoutHeader: "soon"})
	if code != http.StatusBadRequest || !strings.Contains(body, "soon") {
		t.Errorf("status %d body %q, want 400 naming the value", code, body)
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	_, srv, _ := newTestExporter(t, baseConfig, map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"lab": func(_ context.Context, logger *slog.Logger, target string) provider.Verdict {
			logger.Debug("fake check ran")
			if target == "nuc" {
				return provider.Verdict{Reason: kvm.ReasonHostKeyMismatch, Message: "known_hosts has another key"}
			}
			return provider.Verdict{Reason: provider.ReasonReady}
		},
	}, 0)
	for _, tc := range []struct {
		query    string
		code     int
		contains []string
		lacks    []string
	}{
		{"", http.StatusBadRequest, []string{"name parameter is missing"}, nil},
		{"name=nope", http.StatusBadRequest, []string{`unknown name "nope"`}, nil},
		{"name=lab&target=nope", http.StatusBadRequest, []string{`unknown target "nope"`}, nil},
		{"name=lab", http.StatusOK, []string{
			`provider_health_ready{name="lab",provider="kvm",target="beelink"} 1`,
			`provider_health_reason{name="lab",provider="kvm",reason="HostKeyMismatch",target="nuc"} 1`,
		}, []string{`provider="gcp"`, "go_goroutines"}},
		{"name=lab&target=nuc", http.StatusOK, []string{`target="nuc"`}, []string{`target="beelink"`}},
		{"name=lab&target=nuc&debug=true", http.StatusOK, []string{
			"Logs for the check:", "fake check ran", "HostKeyMismatch", "known_hosts has another key",
			"Metrics that would have been returned:", `provider_health_ready{name="lab",provider="kvm",target="nuc"} 0`,
		}, nil},
	} {
		t.Run(tc.query, func(t *testing.T) {
			code, body := get(t, http.DefaultClient, srv.URL+"/probe?"+tc.query, nil)
			if code != tc.code {
				t.Errorf("status %d, want %d: %s", code, tc.code, body)
			}
			for _, s := range tc.contains {
				if !strings.Contains(body, s) {
					t.Errorf("body lacks %q:\n%s", s, body)
				}
			}
			for _, s := range tc.lacks {
				if strings.Contains(body, s) {
					t.Errorf("body has %q", s)
				}
			}
		})
	}
}

// checksTotal sums provider_health_exporter_checks_total over every entry
// and mode, as a scrape would see it.
func checksTotal(t *testing.T, x *exporter) uint64 {
	t.Helper()
	st, err := x.engine.Status("")
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, p := range st {
		for _, c := range p.Checks {
			n += c
		}
	}
	return n
}

func TestStatusJSONAndLandingPage(t *testing.T) {
	t.Parallel()
	x, srv, _ := newTestExporter(t, baseConfig, map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"crawl-prod": fixed(gcp.ReasonAPIDisabled, "Compute Engine API has not been used in project crawl-prod-123"),
	}, 0)
	decode := func(body string) []statusProvider {
		t.Helper()
		var st struct {
			Providers []statusProvider `json:"providers"`
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Providers) != 3 {
			t.Fatalf("%d providers, want 3", len(st.Providers))
		}
		return st.Providers
	}

	// Reading the status checks nothing: every target says it was never
	// checked, and checks_total stays where it was.
	for _, path := range []string{"/api/v1/status", "/", "/api/v1/status?name=lab"} {
		code, body := get(t, http.DefaultClient, srv.URL+path, nil)
		if code != http.StatusOK {
			t.Fatalf("%s: status %d", path, code)
		}
		if path == "/" && !strings.Contains(body, "never checked") {
			t.Errorf("landing page before any scrape lacks \"never checked\"")
		}
		if path == "/api/v1/status" {
			for _, p := range decode(body) {
				for _, tg := range p.Targets {
					if tg.Checked || tg.Reason != "" || tg.LastCheckTime != nil || len(tg.Transitions) != 0 {
						t.Errorf("%s/%s before any scrape: %+v, want never checked", p.Name, tg.Target, tg)
					}
				}
			}
			for _, key := range []string{`"checked": false`, `"lastCheckTime": null`, `"transitions": []`} {
				if !strings.Contains(body, key) {
					t.Errorf("status JSON lacks %s", key)
				}
			}
		}
	}
	if n := checksTotal(t, x); n != 0 {
		t.Errorf("reading the status made %d checks, want 0", n)
	}

	// refresh=true checks, as a scrape does.
	code, body := get(t, http.DefaultClient, srv.URL+"/api/v1/status?refresh=true", nil)
	if code != http.StatusOK {
		t.Fatalf("refresh: status %d", code)
	}
	if n := checksTotal(t, x); n != 4 {
		t.Errorf("refresh made %d checks, want 4 (one per target)", n)
	}
	var gcpTarget statusTarget
	// The reason set of each kind is shown once, after the entries, though
	// /metrics exports only the current reason: what a script needs to
	// know the values the reason label can take; no entry repeats it.
	var sets struct {
		Reasons map[string][]provider.Reason `json:"reasons"`
	}
	if err := json.Unmarshal([]byte(body), &sets); err != nil {
		t.Fatal(err)
	}
	if len(sets.Reasons) != 3 || strings.Count(body, `"Timeout"`) != 3 {
		t.Errorf("reason sets of %d kinds, Timeout listed %d times; want each of the 3 kinds' set once", len(sets.Reasons), strings.Count(body, `"Timeout"`))
	}
	for _, p := range decode(body) {
		set := sets.Reasons[p.Provider]
		for _, r := range []provider.Reason{provider.ReasonReady, provider.ReasonTimeout, provider.ReasonUnknown, p.Targets[0].Reason} {
			if !slices.Contains(set, r) {
				t.Errorf("%s reasons %v lack %s", p.Provider, set, r)
			}
		}
		if p.Provider != "gcp" && slices.Contains(set, gcp.ReasonAPIDisabled) {
			t.Errorf("%s reasons %v have gcp's APIDisabled", p.Provider, set)
		}
		if p.Provider == "gcp" {
			gcpTarget = p.Targets[0]
			if p.Ready {
				t.Error("gcp provider ready despite APIDisabled")
			}
		}
	}
	if !gcpTarget.Checked || gcpTarget.Reason != gcp.ReasonAPIDisabled || !gcpTarget.Up || gcpTarget.Ready ||
		gcpTarget.Address != "projects/crawl-prod-123" || gcpTarget.LastCheckTime == nil || gcpTarget.LastTransitionTime == nil ||
		len(gcpTarget.Transitions) != 1 || gcpTarget.Transitions[0].From != "" || gcpTarget.Transitions[0].To != gcp.ReasonAPIDisabled {
		t.Errorf("gcp target = %+v", gcpTarget)
	}
	for _, key := range []string{`"checked": true`, `"reasons": {`, `"up"`, `"ready"`, `"reason"`, `"message"`, `"lastTransitionTime"`,
		`"lastCheckTime"`, `"durationSeconds"`, `"address"`, `"transitions"`, `"from": ""`, `"to": "APIDisabled"`} {
		if !strings.Contains(body, key) {
			t.Errorf("status JSON lacks %s", key)
		}
	}
	before := checksTotal(t, x)
	if code, _ := get(t, http.DefaultClient, srv.URL+"/?refresh=true", nil); code != http.StatusOK || checksTotal(t, x) != before+4 {
		t.Errorf("landing page refresh: %d, checks %d -> %d, want 4 more", code, before, checksTotal(t, x))
	}
	before = checksTotal(t, x)

	code, page := get(t, http.DefaultClient, srv.URL+"/", nil)
	if code != http.StatusOK {
		t.Fatalf("landing page status %d", code)
	}
	for _, want := range []string{"<table id=\"targets\">", `class="notready"`, `class="ready"`, "APIDisabled",
		"Compute Engine API has not been used in project crawl-prod-123", "/probe?name=lab&amp;target=nuc&amp;debug=true",
		`name="refresh"`, "never checked </i>&rarr; API<wbr>Disabled"} {
		if !strings.Contains(page, want) {
			t.Errorf("landing page lacks %q", want)
		}
	}
	if n := checksTotal(t, x); n != before {
		t.Errorf("a page load made %d checks, want 0", n-before)
	}
	if code, _ := get(t, http.DefaultClient, srv.URL+"/nope", nil); code != http.StatusNotFound {
		t.Errorf("/nope: status %d, want 404", code)
	}
}

func TestReload(t *testing.T) {
	t.Parallel()
	_, srv, path := newTestExporter(t, baseConfig, nil, 0)
	post := func() (int, string) {
		resp, err := http.Post(srv.URL+"/-/reload", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	gauge := func() string {
		_, body := get(t, http.DefaultClient, srv.URL+"/metrics", nil)
		m := regexp.MustCompile(`(?m)^provider_health_exporter_config_last_reload_successful (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			t.Fatal("no reload gauge")
		}
		return m[1]
	}

	if code, _ := get(t, http.DefaultClient, srv.URL+"/-/reload", nil); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /-/reload: %d, want 405", code)
	}
	if err := os.WriteFile(path, []byte("gcp:\n  - name: broken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, body := post()
	if code != http.StatusInternalServerError || !strings.Contains(body, `gcp[0] "broken": project: missing`) {
		t.Errorf("bad reload: %d %q", code, body)
	}
	if g := gauge(); g != "0" {
		t.Errorf("reload gauge %s after a bad file, want 0", g)
	}
	if _, cfg := get(t, http.DefaultClient, srv.URL+"/config", nil); !strings.Contains(cfg, "crawl-prod-123") {
		t.Errorf("old config not in force after a refused reload:\n%s", cfg)
	}
	if code, body := get(t, http.DefaultClient, srv.URL+"/probe?name=lab", nil); code != http.StatusOK {
		t.Errorf("old providers not served after a refused reload: %d %s", code, body)
	}

	writeConfig(t, filepath.Dir(path), "gcp:\n  - name: staging\n    project: crawl-staging-1\n")
	if code, body := post(); code != http.StatusOK {
		t.Fatalf("good reload: %d %q", code, body)
	}
	if g := gauge(); g != "1" {
		t.Errorf("reload gauge %s, want 1", g)
	}
	if code, _ := get(t, http.DefaultClient, srv.URL+"/probe?name=lab", nil); code != http.StatusBadRequest {
		t.Errorf("removed provider still probed: %d", code)
	}
	if _, body := get(t, http.DefaultClient, srv.URL+"/metrics", nil); !strings.Contains(body, `provider_health_ready{name="staging",provider="gcp",target="compute"} 1`) {
		t.Error("new provider not in /metrics")
	}
}

func TestMaxRequests(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	_, srv, _ := newTestExporter(t, baseConfig, map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"crawl-prod": func(ctx context.Context, _ *slog.Logger, _ string) provider.Verdict {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return provider.Verdict{Reason: provider.ReasonReady}
		},
	}, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		code, body := get(t, http.DefaultClient, srv.URL+"/metrics", nil)
		if code != http.StatusOK {
			t.Errorf("first scrape: %d %s", code, body)
		}
	})
	<-entered
	code, body := get(t, http.DefaultClient, srv.URL+"/probe?name=lab", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "--web.max-requests=1") {
		t.Errorf("second scrape: %d %q, want 503", code, body)
	}
	// Health endpoints are not limited: a busy exporter is still alive.
	if code, _ := get(t, http.DefaultClient, srv.URL+"/-/healthy", nil); code != http.StatusOK {
		t.Errorf("/-/healthy %d while busy", code)
	}
	close(release)
	wg.Wait()
}

func TestHealthReadyConfig(t *testing.T) {
	t.Parallel()
	_, srv, _ := newTestExporter(t, baseConfig, nil, 0)
	for path, want := range map[string]string{"/-/healthy": "Healthy", "/-/ready": "Ready", "/config": "max_concurrent_dials: 128"} {
		code, body := get(t, http.DefaultClient, srv.URL+path, nil)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("%s: %d %q, want 200 with %q", path, code, body, want)
		}
	}
}

// TestGoldenMetrics pins the whole /metrics output of a fixed setup, less
// the families whose values change from run to run.
func TestGoldenMetrics(t *testing.T) {
	t.Parallel()
	_, srv, _ := newTestExporter(t, baseConfig, map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"crawl-prod": fixed(provider.ReasonRateLimited, "quota"),
		"lab": func(_ context.Context, _ *slog.Logger, target string) provider.Verdict {
			if target == "nuc" {
				return provider.Verdict{Reason: kvm.ReasonPoolInactive, Facts: &kvm.Facts{
					User: "proxyops", LibvirtVersion: "9.0.0", Pool: "default", PoolState: "inactive", Connects: 1}}
			}
			return provider.Verdict{Reason: provider.ReasonReady, Facts: &kvm.Facts{
				User: "proxyops", LibvirtVersion: "9.0.0", Pool: "default", PoolState: "running",
				CapacityBytes: 107374182400, AllocationBytes: 21474836480, AvailableBytes: 85899345920, Connects: 1}}
		},
	}, 0)
	_, body := get(t, http.DefaultClient, srv.URL+"/metrics", map[string]string{engine.ScrapeTimeoutHeader: "10"})
	got := stableMetrics(body)
	golden := filepath.Join("..", "..", "testdata", "golden", "metrics.txt")
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("/metrics differs from %s (go test ./cmd/... -run TestGoldenMetrics -update to accept):\n%s", golden, diffLines(string(want), got))
	}
	// The linter `promtool check metrics` runs, in process; the promtool
	// binaries themselves check every exposition format in
	// TestExpositionFormats (-tags promtool).
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// stableMetrics drops families and series whose values depend on the run.
func stableMetrics(body string) string {
	unstable := regexp.MustCompile(`^(# (HELP|TYPE) )?(go_|process_|promhttp_|provider_health_exporter_build_info|provider_health_check_duration_seconds|provider_health_last_check_timestamp_seconds|provider_health_last_transition_timestamp_seconds|provider_health_exporter_config_last_reload_success_timestamp_seconds)`)
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if line == "" || unstable.MatchString(line) {
			continue
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n") + "\n"
}

func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	inW := map[string]bool{}
	for _, l := range w {
		inW[l] = true
	}
	inG := map[string]bool{}
	for _, l := range g {
		inG[l] = true
	}
	var b strings.Builder
	for _, l := range w {
		if !inG[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range g {
		if !inW[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}

// TestNoGoroutineLeakAcrossScrapes scrapes many times at once, some
// scrapes timing out, and checks that every goroutine the scrapes started
// has ended: in a synctest bubble, which fails the test if any goroutine
// started in it is still blocked when the test ends. Time is fake, so the
// scrapes time out in the same order however slow the machine.
func TestNoGoroutineLeakAcrossScrapes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		x := newBubbleExporter(t, map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
			"crawl-prod": func(ctx context.Context, _ *slog.Logger, _ string) provider.Verdict {
				<-ctx.Done() // slow, but honours its deadline
				return provider.Verdict{Reason: provider.ReasonUnreachable}
			},
		})
		h := x.handler()
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Go(func() {
				path := "/metrics"
				if i%3 == 0 {
					path = "/probe?name=lab"
				}
				r := httptest.NewRequest(http.MethodGet, path, nil)
				r.Header.Set(engine.ScrapeTimeoutHeader, "0.2")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					t.Errorf("%s: status %d", path, w.Code)
				}
			})
		}
		wg.Wait()
		x.engine.Close()
	})
}

func TestMetricsCollectFilter(t *testing.T) {
	t.Parallel()
	_, srv, _ := newTestExporter(t, baseConfig, nil, 0)
	for _, tc := range []struct {
		query         string
		code          int
		want, notWant []string
	}{
		{"collect[]=exporter", http.StatusOK,
			[]string{"provider_health_exporter_config_last_reload_successful 1", "go_goroutines"},
			[]string{"provider_health_ready", "provider_health_exporter_checks_total"}},
		{"collect[]=kvm", http.StatusOK,
			[]string{`provider_health_ready{name="lab",provider="kvm",target="nuc"} 1`, "provider_health_exporter_build_info"},
			[]string{`provider="gcp"`, `provider="kubernetes"`}},
		{"collect[]=gcp&collect[]=kubernetes", http.StatusOK,
			[]string{`provider="gcp"`, `provider="kubernetes"`},
			[]string{`provider="kvm"`}},
		{"collect[]=bogus", http.StatusBadRequest, []string{`collect[]="bogus"`}, nil},
	} {
		code, body := get(t, http.DefaultClient, srv.URL+"/metrics?"+tc.query, nil)
		if code != tc.code {
			t.Errorf("%s: status %d, want %d", tc.query, code, tc.code)
		}
		for _, s := range tc.want {
			if !strings.Contains(body, s) {
				t.Errorf("%s: lacks %q", tc.query, s)
			}
		}
		for _, s := range tc.notWant {
			if strings.Contains(body, s) {
				t.Errorf("%s: has %q", tc.query, s)
			}
		}
	}
}

// TestServeResultsIsWhatPromhttpServes compares the answer of
// serveResults with promhttp's for the same results, for the Accept and
// Accept-Encoding headers scrapers send: same headers, same body.
func TestServeResultsIsWhatPromhttpServes(t *testing.T) {
	t.Parallel()
	x, _, _ := newTestExporter(t, baseConfig, map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"crawl-prod": fixed(provider.ReasonRateLimited, "quota"),
		"lab": func(context.Context, *slog.Logger, string) provider.Verdict {
			return provider.Verdict{Reason: provider.ReasonReady, Facts: &kvm.Facts{
				User: "proxyops", LibvirtVersion: "9.0.0", Pool: "default", PoolState: "running", Connects: 1}}
		},
	}, 0)
	results, err := x.engine.Run(context.Background(), engine.Request{})
	if err != nil {
		t.Fatal(err)
	}
	// The exporter's own metrics, less those that change between two
	// gathers (go_, process_).
	self := prometheus.NewRegistry()
	self.MustRegister(x.reloadOK, versioncollector.NewCollector("provider_health_exporter"))
	// The results' families as the Exposition has them (the collector's
	// tests pin those to what a Registry gathers), for promhttp to encode.
	reg := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return expositionFamilies(results) })
	ref := promhttp.HandlerFor(prometheus.Gatherers{self, reg}, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, EnableOpenMetrics: true})
	for _, h := range []struct{ accept, encoding, query string }{
		{"", "", ""},
		{"text/plain;version=0.0.4", "gzip", ""},
		{"application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,*/*;q=0.1", "gzip, deflate", ""},
		{"application/openmetrics-text;version=0.0.1", "identity;q=0.5, gzip;q=0.9", ""},
		{"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.8,*/*;q=0.1", "gzip;q=0", ""},
		{"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text", "*", ""},
		{"text/plain", "br, *;q=0.1", "name[]=provider_health_up&name[]=provider_health_exporter_build_info"},
	} {
		serve := func(handler http.Handler) *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodGet, "/metrics?"+h.query, nil)
			if h.accept != "" {
				r.Header.Set("Accept", h.accept)
			}
			if h.encoding != "" {
				r.Header.Set("Accept-Encoding", h.encoding)
			}
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, r)
			return w
		}
		want := serve(ref)
		got := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { x.serveResults(w, r, results, self) }))
		for _, k := range []string{"Content-Type", "Content-Encoding", "Vary"} {
			if g, w := got.Header().Values(k), want.Header().Values(k); !slices.Equal(g, w) {
				t.Errorf("%+v: %s %q, promhttp %q", h, k, g, w)
			}
		}
		if g, w := decoded(t, got), decoded(t, want); g != w {
			t.Errorf("%+v: body differs from promhttp's:\n%s", h, diffLines(w, g))
		}
	}
}

// expositionFamilies decodes the Exposition of results written as
// delimited protobuf.
func expositionFamilies(results []engine.ProviderResult) ([]*dto.MetricFamily, error) {
	x, err := engine.NewExposition(results)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := x.Write(&buf, expfmt.NewFormat(expfmt.TypeProtoDelim), nil, nil); err != nil {
		return nil, err
	}
	var out []*dto.MetricFamily
	dec := expfmt.NewDecoder(&buf, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		out = append(out, mf)
	}
}

func decoded(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	if w.Header().Get("Content-Encoding") != "gzip" {
		return w.Body.String()
	}
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// slowWriter is a client whose connection takes delay for the first write
// of an answer: a slow network, or a machine too loaded to encode fast.
type slowWriter struct {
	*httptest.ResponseRecorder
	delay time.Duration
	slept bool
}

func (w *slowWriter) Write(b []byte) (int, error) {
	if !w.slept {
		w.slept = true
		time.Sleep(w.delay)
	}
	return w.ResponseRecorder.Write(b)
}

// TestAnswerLeavesWithinTheBudget: when writing the answer takes time, the
// next scrape of that shape ends its checks that much earlier, so that
// with a hung provider the whole answer, not only the checks, is done
// within the budget; check_timeout_seconds says what the checks had. In
// a synctest bubble: only the time the writer sleeps passes, however
// slow the machine.
func TestAnswerLeavesWithinTheBudget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		x := newBubbleExporter(t, map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
			"crawl-prod": func(context.Context, *slog.Logger, string) provider.Verdict {
				<-release // hangs, ignoring its context
				return provider.Verdict{Reason: provider.ReasonReady}
			},
		})
		defer x.engine.Close()
		defer close(release)
		h := x.handler()
		const budget = 4500 * time.Millisecond // header 5 s, offset 0.5 s
		scrape := func() (time.Duration, string) {
			r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			r.Header.Set(engine.ScrapeTimeoutHeader, "5")
			w := &slowWriter{ResponseRecorder: httptest.NewRecorder(), delay: 300 * time.Millisecond}
			begin := time.Now()
			h.ServeHTTP(w, r)
			return time.Since(begin), w.Body.String()
		}
		first, body := scrape()
		if first != budget+300*time.Millisecond || !strings.Contains(body, `provider_health_check_timeout_seconds{name="crawl-prod",provider="gcp"} 4.5`) {
			t.Errorf("first scrape took %v, want the budget and the write; body:\n%s", first, body)
		}
		second, body := scrape()
		if second > budget {
			t.Errorf("second scrape took %v, want it within the budget of %v", second, budget)
		}
		// It reserved twice what the first answer took.
		for _, want := range []string{
			`provider_health_check_timeout_seconds{name="crawl-prod",provider="gcp"} 3.9`,
			`provider_health_reason{name="crawl-prod",provider="gcp",reason="Timeout",target="compute"} 1`,
			`provider_health_ready{name="lab",provider="kvm",target="nuc"} 1`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("second scrape lacks %s", want)
			}
		}
	})
}

func TestAnswerTimesAreBounded(t *testing.T) {
	t.Parallel()
	var a answerTimes
	a.observe("metrics", 10*time.Millisecond)
	if got := a.reserve("metrics"); got != 20*time.Millisecond {
		t.Errorf("reserve %v, want twice the last answer", got)
	}
	for i := range maxAnswerShapes {
		a.observe(fmt.Sprint("shape", i), time.Millisecond)
	}
	if len(a.last) > maxAnswerShapes {
		t.Errorf("%d shapes remembered, want at most %d", len(a.last), maxAnswerShapes)
	}
}

// TestGoldenSeriesPerTarget counts what one target of each kind costs a
// Prometheus that scrapes the exporter, with the golden file's entries,
// which set no optional key: the series that carry its target label, the
// golden file's plus those stableMetrics leaves out of it.
func TestGoldenSeriesPerTarget(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "golden", "metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	unstable := []string{"provider_health_check_duration_seconds", "provider_health_last_check_timestamp_seconds",
		"provider_health_last_transition_timestamp_seconds"}
	for _, m := range unstable {
		if stableMetrics(m+`{name="a",provider="kvm",target="b"} 1`) != "\n" {
			t.Fatalf("%s is in the golden file: count it once only", m)
		}
	}
	nameTarget := regexp.MustCompile(`[{,]name="([^"]*)".*[{,]target="([^"]*)"`)
	provider := regexp.MustCompile(`[{,]provider="([^"]*)"`)
	series, kinds := map[string]int{}, map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		m := nameTarget.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		key := m[1] + "/" + m[2]
		series[key]++
		if strings.HasPrefix(line, "provider_health_up{") {
			kinds[key] = provider.FindStringSubmatch(line)[1]
		}
	}
	limits := map[string]int{"kvm": 14, "gcp": 10, "kubernetes": 10}
	seen := map[string]bool{}
	for key, n := range series {
		n += len(unstable)
		kind := kinds[key]
		seen[kind] = true
		if limit, ok := limits[kind]; !ok || n > limit {
			t.Errorf("%s (%q) has %d series, want at most %d", key, kind, n, limit)
		}
		t.Logf("%s (%s): %d series", key, kind, n)
	}
	for kind := range limits {
		if !seen[kind] {
			t.Errorf("the golden file has no %s target", kind)
		}
	}
}

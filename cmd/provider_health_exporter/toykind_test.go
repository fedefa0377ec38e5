package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// The toy kind of docs/development.md's "Adding a provider": an http kind whose
// one target per entry is a URL that must answer 200. Everything it is,
// its configuration, its reasons, its checker, is in this file; the
// framework files are not edited for it.

const httpKindName = "http"

// reasonHTTPError: the URL answered with a status other than 200. The
// server answered, so the kind counts it as up.
const reasonHTTPError collector.Reason = "HTTPError"

// httpEntry is one entry of the http section.
type httpEntry struct {
	Name         string `yaml:"name"`
	URL          string `yaml:"url"`
	config.Check `yaml:",inline"`
}

func (e *httpEntry) EntryName() string          { return e.Name }
func (e *httpEntry) ResolvePaths(func(*string)) {}
func (e *httpEntry) TargetCount() int           { return 1 }
func (e *httpEntry) Validate(where string) error {
	if e.URL == "" {
		return fmt.Errorf("%s: url: missing (required)", where)
	}
	if u, err := url.Parse(e.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s: url: %q is not an http(s) URL", where, e.URL)
	}
	return nil
}

// httpChecker checks that its URL answers 200.
type httpChecker struct {
	url    string
	client *http.Client
}

func (c *httpChecker) Targets() []collector.Target {
	return []collector.Target{{Name: "url", Address: c.url}}
}

func (c *httpChecker) Check(ctx context.Context, logger *slog.Logger, _ string) collector.Verdict {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return collector.Verdict{Reason: collector.ReasonUnknown, Message: err.Error()}
	}
	resp, err := c.client.Do(req)
	switch {
	case collector.Ended(ctx):
		return collector.Verdict{Reason: collector.ReasonTimeout, Message: "no answer within the deadline"}
	case err != nil:
		logger.Debug("request failed", "err", err)
		return collector.Verdict{Reason: collector.ReasonUnreachable, Message: err.Error()}
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return collector.Verdict{Reason: reasonHTTPError, Message: resp.Status}
	}
	return collector.Verdict{Reason: collector.ReasonReady, Message: resp.Status}
}

// httpKind is the kind's row of the table.
func httpKind() collector.Kind {
	return collector.NewKind(collector.KindOf[*httpEntry, *httpChecker]{
		Section: config.Section{Kind: httpKindName, New: func() config.Entry { return &httpEntry{} }},
		Reasons: collector.ReasonSet{
			{Reason: collector.ReasonReady, Up: true},
			{Reason: collector.ReasonUnreachable},
			{Reason: collector.ReasonTimeout},
			{Reason: reasonHTTPError, Up: true},
			collector.UnknownReason(),
		},
		NewChecker: func(h *httpEntry, _ *slog.Logger, _ ...collector.Option) (*httpChecker, error) {
			return &httpChecker{url: h.URL, client: &http.Client{Transport: collector.BoundedTransport(http.DefaultTransport)}}, nil
		},
	})
}

// toyKinds is the exporter's table with the toy kind's row added.
func toyKinds() []collector.Kind { return append(builtinKinds(), httpKind()) }

// TestToyKind: a kind that is a package (here a file) and a row of the
// table gets strict decoding of its section with errors that name its
// entries, --config.check, /metrics with up, ready and the state set of
// its own reasons, collect[], /probe and the status page.
func TestToyKind(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok" {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(backend.Close)
	dir := t.TempDir()

	// Strict decoding, errors in two sections at once, each attributed
	// to its own entry.
	bad := writeConfig(t, dir, "gcp:\n  - name: g\n    project: p\n    bogus1: x\nhttp:\n  - name: web\n    url: "+backend.URL+"/ok\n    bogus2: y\n")
	var stdout, stderr bytes.Buffer
	if code := checkConfig(toyKinds(), bad, &stdout, &stderr); code != 1 {
		t.Fatalf("--config.check of a bad file exited %d", code)
	}
	want := `FAILED: config file ` + bad + `: line 4: gcp[0] "g": unknown field "bogus1"; line 8: http[0] "web": unknown field "bogus2"` + "\n"
	if stderr.String() != want {
		t.Errorf("--config.check said\n%s\nwant\n%s", stderr.String(), want)
	}
	// The kind's own validation, with the entry named.
	stderr.Reset()
	bad = writeConfig(t, dir, "http:\n  - name: web\n    url: ftp://x\n")
	if checkConfig(toyKinds(), bad, &stdout, &stderr) != 1 || !strings.Contains(stderr.String(), `http[0] "web": url: "ftp://x" is not an http(s) URL`) {
		t.Errorf("--config.check of a bad url: %s", stderr.String())
	}

	path := writeConfig(t, dir, "defaults:\n  timeout: 5s\nhttp:\n  - name: web\n    url: "+backend.URL+"/ok\n  - name: down\n    url: "+backend.URL+"/down\n    timeout: 7s\n")
	stdout.Reset()
	stderr.Reset()
	if code := checkConfig(toyKinds(), path, &stdout, &stderr); code != 0 {
		t.Fatalf("--config.check exited %d: %s", code, stderr.String())
	}
	if want := "SUCCESS: " + path + ": 0 kubernetes, 0 gcp, 0 kvm (0 hosts), 2 http: 2 targets\n"; stdout.String() != want {
		t.Errorf("--config.check said %q, want %q", stdout.String(), want)
	}

	x := newExporter(exporterOptions{
		logger: slog.New(slog.DiscardHandler), configFile: path, kinds: toyKinds(),
		offset: 500 * time.Millisecond, metricsPath: "/metrics",
	})
	if err := x.reload(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.engine.Close)
	if got := longestTimeout(x.config()); got != 10*time.Second {
		// The default 10s still bounds the write; 7s is under it.
		t.Errorf("longestTimeout = %s", got)
	}
	srv := httptest.NewServer(x.handler())
	t.Cleanup(srv.Close)
	client := srv.Client()

	_, body := get(t, client, srv.URL+"/metrics", nil)
	for _, want := range []string{
		`provider_health_up{name="web",provider="http",target="url"} 1`,
		`provider_health_ready{name="web",provider="http",target="url"} 1`,
		`provider_health_up{name="down",provider="http",target="url"} 1`,
		`provider_health_ready{name="down",provider="http",target="url"} 0`,
		`provider_health_reason{name="down",provider="http",reason="HTTPError",target="url"} 1`,
		`provider_health_reason{name="down",provider="http",reason="Unreachable",target="url"} 0`,
		`provider_health_reason{name="web",provider="http",reason="Ready",target="url"} 1`,
		`provider_health_check_timeout_seconds{name="down",provider="http"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if n := strings.Count(body, `provider_health_reason{name="web"`); n != 5 {
		t.Errorf("web has %d reason series, want the 5 of its set", n)
	}

	code, body := get(t, client, srv.URL+"/metrics?collect[]=http", nil)
	if code != http.StatusOK || !strings.Contains(body, `provider_health_ready{name="web",provider="http",target="url"} 1`) {
		t.Errorf("collect[]=http: %d\n%s", code, body)
	}
	code, body = get(t, client, srv.URL+"/metrics?collect[]=exporter", nil)
	if code != http.StatusOK || strings.Contains(body, `provider="http"`) {
		t.Errorf("collect[]=exporter: %d\n%s", code, body)
	}
	code, body = get(t, client, srv.URL+"/metrics?collect[]=nope", nil)
	if code != http.StatusBadRequest || !strings.Contains(body, "kvm, http, exporter") {
		t.Errorf("collect[]=nope: %d %s", code, body)
	}

	_, body = get(t, client, srv.URL+"/probe?name=down&debug=true", nil)
	if !strings.Contains(body, "Verdict for http/down/url: HTTPError (up=true ready=false)") {
		t.Errorf("/probe?debug=true:\n%s", body)
	}
	_, body = get(t, client, srv.URL+"/probe?name=web", nil)
	if !strings.Contains(body, `provider_health_ready{name="web",provider="http",target="url"} 1`) {
		t.Errorf("/probe:\n%s", body)
	}

	_, body = get(t, client, srv.URL+"/api/v1/status", nil)
	for _, want := range []string{`"provider": "http"`, `"name": "down"`, `"reason": "HTTPError"`, `"up": true`} {
		if !strings.Contains(body, want) {
			t.Errorf("/api/v1/status lacks %s:\n%s", want, body)
		}
	}
	_, body = get(t, client, srv.URL+"/", nil)
	if !strings.Contains(body, "HTTPError") || !strings.Contains(body, "down") {
		t.Errorf("status page lacks the http entries:\n%s", body)
	}
	_, body = get(t, client, srv.URL+"/config", nil)
	if !strings.Contains(body, "http:\n    - name: web\n") {
		t.Errorf("/config lacks the http section:\n%s", body)
	}
	// /sd: one group per entry, selected by name= alone (one target each).
	_, body = get(t, client, srv.URL+"/sd", nil)
	var groups []struct {
		Labels map[string]string `json:"labels"`
	}
	if err := json.Unmarshal([]byte(body), &groups); err != nil {
		t.Fatalf("/sd: %v\n%s", err, body)
	}
	var names []string
	for _, g := range groups {
		if g.Labels["provider"] != httpKindName {
			continue
		}
		names = append(names, g.Labels["__param_name"])
		if _, ok := g.Labels["__param_target"]; ok {
			t.Errorf("/sd gives a one-target kind __param_target: %v", g.Labels)
		}
	}
	if slices.Sort(names); !slices.Equal(names, []string{"down", "web"}) {
		t.Errorf("/sd lists http entries %v, want [down web]\n%s", names, body)
	}
}

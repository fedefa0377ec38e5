package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// newOptionsExporter serves an exporter of fake checkers with the given
// options, under its route prefix as main serves it.
func newOptionsExporter(t *testing.T, body string, set func(*exporterOptions)) (*exporter, *httptest.Server, string) {
	t.Helper()
	path := writeConfig(t, t.TempDir(), body)
	o := exporterOptions{
		logger:      slog.New(slog.DiscardHandler),
		configFile:  path,
		entries:     fakeEntries(nil),
		offset:      500 * time.Millisecond,
		metricsPath: "/metrics",
	}
	if set != nil {
		set(&o)
	}
	x := newExporter(o)
	if err := x.reload(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(underPrefix(o.web.routePrefix, x.handler()))
	t.Cleanup(func() {
		srv.Close()
		x.engine.Close()
	})
	return x, srv, path
}

func withWeb(t *testing.T, externalURL, routePrefix string) func(*exporterOptions) {
	t.Helper()
	paths, err := resolveWebPaths(externalURL, routePrefix)
	if err != nil {
		t.Fatal(err)
	}
	return func(o *exporterOptions) { o.web, o.linkPrefix = paths, paths.linkPrefix }
}

// getSD fetches and decodes /sd as Prometheus's http_sd does: an array of
// groups, each with targets and string labels, and nothing else.
func getSD(t *testing.T, url string, host string) []sdGroup {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %s, want 200 application/json", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var groups []sdGroup
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&groups); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return groups
}

// sdKeys lists the groups as "provider/name/target [param_target]".
func sdKeys(groups []sdGroup) []string {
	var out []string
	for _, g := range groups {
		k := g.Labels["provider"] + "/" + g.Labels["name"] + "/" + g.Labels["target"]
		if pt, ok := g.Labels["__param_target"]; ok {
			k += " target=" + pt
		}
		out = append(out, k)
	}
	return out
}

// TestSDListsWhatProbeServes checks that every group /sd gives is a /probe
// scrape that answers for exactly its entry and target, that single-target
// kinds have no __param_target and kvm hosts each have theirs, and that the
// address is the request's Host.
func TestSDListsWhatProbeServes(t *testing.T) {
	t.Parallel()
	_, srv, _ := newOptionsExporter(t, baseConfig, nil)
	u, _ := url.Parse(srv.URL)
	groups := getSD(t, srv.URL+"/sd", "")
	want := []string{
		"gcp/crawl-prod/compute",
		"kubernetes/prod-cluster/apiserver",
		"kvm/lab/beelink target=beelink",
		"kvm/lab/nuc target=nuc",
	}
	got := sdKeys(groups)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("/sd groups %q, want %q", got, want)
	}
	for _, g := range groups {
		if !slices.Equal(g.Targets, []string{u.Host}) {
			t.Errorf("%v: targets %q, want the exporter's own address %q", sdKeys([]sdGroup{g}), g.Targets, u.Host)
		}
		if g.Labels["__metrics_path__"] != "/probe" || g.Labels["__scheme__"] != "http" || g.Labels["__param_name"] != g.Labels["name"] {
			t.Errorf("group labels %v", g.Labels)
		}
		// Scrape the group as Prometheus would: its address, path and params.
		q := url.Values{"name": {g.Labels["__param_name"]}}
		if pt, ok := g.Labels["__param_target"]; ok {
			q.Set("target", pt)
		}
		code, body := get(t, http.DefaultClient, g.Labels["__scheme__"]+"://"+g.Targets[0]+g.Labels["__metrics_path__"]+"?"+q.Encode(), nil)
		series := `provider_health_ready{name="` + g.Labels["name"] + `",provider="` + g.Labels["provider"] + `",target="` + g.Labels["target"] + `"} 1`
		if code != http.StatusOK || !strings.Contains(body, series) || strings.Count(body, "provider_health_ready{") != 1 {
			t.Errorf("probe of %v: %d, want one target with %s:\n%s", g.Labels, code, series, body)
		}
	}

	// Behind a proxy that keeps the Host header, the address is the proxy's.
	for _, g := range getSD(t, srv.URL+"/sd", "phe.example:9877") {
		if !slices.Equal(g.Targets, []string{"phe.example:9877"}) {
			t.Errorf("with Host phe.example:9877: targets %q", g.Targets)
		}
	}
}

func TestSDRoutePrefixAndExternalURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		externalURL, routePrefix string
		sdPath                   string // where /sd is served
		address, scheme, path    string // what it gives
	}{
		{"", "/phe/", "/phe/sd", "", "http", "/phe/probe"},
		{"https://phe.example/outer/", "", "/outer/sd", "phe.example", "https", "/outer/probe"},
		// A proxy that maps /outer to the exporter's /inner: Prometheus goes
		// through the proxy, so the path is the external one.
		{"http://phe.example:8080/outer", "/inner", "/inner/sd", "phe.example:8080", "http", "/outer/probe"},
	} {
		_, srv, _ := newOptionsExporter(t, baseConfig, withWeb(t, tc.externalURL, tc.routePrefix))
		u, _ := url.Parse(srv.URL)
		address := tc.address
		if address == "" {
			address = u.Host
		}
		groups := getSD(t, srv.URL+tc.sdPath, "")
		if len(groups) != 4 {
			t.Errorf("%+v: %d groups, want 4", tc, len(groups))
		}
		for _, g := range groups {
			if !slices.Equal(g.Targets, []string{address}) || g.Labels["__scheme__"] != tc.scheme || g.Labels["__metrics_path__"] != tc.path {
				t.Errorf("%+v: group %q %v, want address %s, scheme %s, path %s", tc, g.Targets, g.Labels, address, tc.scheme, tc.path)
			}
		}
		if tc.externalURL == "" {
			// The path given is the one the server answers /probe on.
			if code, body := get(t, http.DefaultClient, srv.URL+tc.path+"?name=crawl-prod", nil); code != http.StatusOK {
				t.Errorf("%+v: GET %s: %d %s", tc, tc.path, code, body)
			}
		}
	}
}

func TestSDFollowsReload(t *testing.T) {
	t.Parallel()
	_, srv, path := newOptionsExporter(t, baseConfig, nil)
	if n := len(getSD(t, srv.URL+"/sd", "")); n != 4 {
		t.Fatalf("%d groups before the reload, want 4", n)
	}
	added := strings.Replace(baseConfig, "        name: nuc\n", "        name: nuc\n      - address: 127.0.0.1:2224\n        name: optiplex\n", 1)
	writeConfig(t, filepath.Dir(path), added)
	resp, err := http.Post(srv.URL+"/-/reload", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: %d", resp.StatusCode)
	}
	if got := sdKeys(getSD(t, srv.URL+"/sd", "")); !slices.Contains(got, "kvm/lab/optiplex target=optiplex") || len(got) != 5 {
		t.Errorf("after adding a host: %q", got)
	}
	writeConfig(t, filepath.Dir(path), "gcp:\n  - name: staging\n    project: crawl-staging-1\n")
	resp, err = http.Post(srv.URL+"/-/reload", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := sdKeys(getSD(t, srv.URL+"/sd", "")); !slices.Equal(got, []string{"gcp/staging/compute"}) {
		t.Errorf("after removing all but one entry: %q", got)
	}
}

// A kvm entry with a single host is still a multi-target kind: /probe of its
// name alone would check every host it will ever have.
func TestSDSingleHostKVMKeepsTarget(t *testing.T) {
	t.Parallel()
	_, srv, _ := newOptionsExporter(t, "kvm:\n  - name: solo\n    user: u\n    private_key_file: placeholder\n    known_hosts_file: placeholder\n    hosts:\n      - address: 127.0.0.1:2222\n        name: only\n", nil)
	if got := sdKeys(getSD(t, srv.URL+"/sd", "")); !slices.Equal(got, []string{"kvm/solo/only target=only"}) {
		t.Errorf("groups %q", got)
	}
}

func TestSDWithoutHost(t *testing.T) {
	t.Parallel()
	x, _, _ := newOptionsExporter(t, baseConfig, nil)
	r := httptest.NewRequest(http.MethodGet, "/sd", nil)
	r.Host = ""
	w := httptest.NewRecorder()
	x.handler().ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "--web.external-url") {
		t.Errorf("no Host: %d %q, want 400 naming --web.external-url", w.Code, w.Body.String())
	}
}

func TestPprofFlag(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		set := withWeb(t, "", "/phe")
		_, srv, _ := newOptionsExporter(t, baseConfig, func(o *exporterOptions) { set(o); o.enablePprof = on })
		for _, p := range []string{"/phe/debug/pprof/", "/phe/debug/pprof/cmdline", "/phe/debug/pprof/heap?debug=1"} {
			want := http.StatusNotFound
			if on {
				want = http.StatusOK
			}
			if code, body := get(t, http.DefaultClient, srv.URL+p, nil); code != want {
				t.Errorf("--web.enable-pprof=%v: GET %s: %d, want %d\n%.200s", on, p, code, want, body)
			}
		}
	}
}

func TestDisableExporterMetrics(t *testing.T) {
	t.Parallel()
	runtime := []string{"go_goroutines ", "process_start_time_seconds ", "promhttp_metric_handler_requests_total{"}
	kept := []string{"provider_health_exporter_build_info{", "provider_health_exporter_config_last_reload_successful 1", `provider_health_ready{name="lab",provider="kvm",target="nuc"} 1`}
	for _, disable := range []bool{false, true} {
		_, srv, _ := newOptionsExporter(t, baseConfig, func(o *exporterOptions) { o.disableExporterMetrics = disable })
		// Twice: promhttp's counter shows from the second scrape on.
		get(t, http.DefaultClient, srv.URL+"/metrics", nil)
		_, body := get(t, http.DefaultClient, srv.URL+"/metrics", nil)
		for _, m := range runtime {
			if strings.Contains(body, "\n"+m) == disable {
				t.Errorf("--web.disable-exporter-metrics=%v: %q present: %v", disable, m, !disable)
			}
		}
		for _, m := range kept {
			if !strings.Contains(body, m) {
				t.Errorf("--web.disable-exporter-metrics=%v: %q missing", disable, m)
			}
		}
	}
}

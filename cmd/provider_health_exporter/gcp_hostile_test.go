package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestGCPHostileAnswers runs the real binary against a Compute that answers
// what the GCP checks must survive (docs/security.md: "What the exporter
// bounds"): 20 regions each with a 4 MB quotaStatusWarning message (over
// the 256 KiB limit of a region's answer, inside the 4 MiB of any answer),
// 20 regions each with a 200 KB one (inside both), a NaN usage, a metric
// listed twice, a region DOWN and an OBSOLETE source image, beside a
// healthy project. The process, run as a replica of up to 100 hosts is (a
// 128 MiB memory limit in PROVIDER_HEALTH_MEMORY_LIMIT; docs/scaling.md:
// "Sizing"), stays up with its peak RSS (VmHWM) under that limit, every page answers within the scrape timeout, the
// hostile entries' messages, details and log stay bounded, and every other
// entry keeps its own verdict.
func TestGCPHostileAnswers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"test-token","expires_in":3599,"token_type":"Bearer"}`)
	}))
	t.Cleanup(tokens.Close)

	warning := func(size int) []byte {
		b, err := json.Marshal(map[string]any{"status": "UP", "quotaStatusWarning": map[string]any{
			"code": "QUOTA_INFO_UNAVAILABLE", "message": strings.Repeat("w", size),
			"data": []map[string]string{{"key": "region", "value": "r"}}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bigWarning, warning200K := warning(4_000_000), warning(200_000)
	quotas := func(status string, q ...string) string {
		return `{"status":"` + status + `","quotas":[` + strings.Join(q, ",") + `]}`
	}
	okQuotas := quotas("UP", `{"metric":"CPUS","limit":24,"usage":6}`, `{"metric":"INSTANCES","limit":24,"usage":3}`)
	// Each project is one entry; its regions.get and images answers.
	regionAnswers := map[string]string{
		"good":      okQuotas,
		"nan":       quotas("UP", `{"metric":"CPUS","limit":24,"usage":"NaN"}`, `{"metric":"INSTANCES","limit":24,"usage":3}`),
		"duplicate": quotas("UP", `{"metric":"CPUS","limit":24,"usage":24}`, `{"metric":"INSTANCES","limit":24,"usage":3}`, `{"metric":"CPUS","limit":24,"usage":0}`),
		"down":      quotas("DOWN", `{"metric":"CPUS","limit":24,"usage":6}`, `{"metric":"INSTANCES","limit":24,"usage":3}`),
		"image":     okQuotas,
	}
	var regionRequests atomic.Int64
	compute := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		rest, ok := strings.CutPrefix(r.URL.Path, "/compute/v1/projects/")
		project, rest, _ := strings.Cut(rest, "/")
		switch {
		case !ok:
			http.NotFound(w, r)
		case rest == "aggregated/instances":
			fmt.Fprint(w, `{"kind":"compute#instanceAggregatedList","items":{}}`)
		case strings.HasPrefix(rest, "regions/"):
			regionRequests.Add(1)
			switch project {
			case "hostile":
				_, _ = w.Write(bigWarning)
				return
			case "chatty":
				_, _ = w.Write(warning200K)
				return
			case "down":
				if strings.HasSuffix(rest, "/us-central1") {
					fmt.Fprint(w, okQuotas)
					return
				}
			}
			fmt.Fprint(w, regionAnswers[project])
		case strings.HasPrefix(rest, "global/images/"):
			fmt.Fprint(w, `{"name":"debian-12-bookworm-v20231010","deprecated":{"state":"OBSOLETE",`+
				`"replacement":"https://www.googleapis.com/compute/v1/projects/debian-cloud/global/images/debian-12-bookworm-v20240213"}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(compute.Close)

	creds := filepath.Join(dir, "gcp.json")
	writeFile(t, creds, serviceAccountJSON(t, tokens.URL+"/token"))
	hostileRegions := make([]string, 20)
	for i := range hostileRegions {
		hostileRegions[i] = "test-region" + strconv.Itoa(i+1)
	}
	entry := func(project string, regions []string, extra string) string {
		return fmt.Sprintf("  - name: %s\n    project: %s\n    credentials_file: %s\n    endpoint: %s\n    timeout: 2m\n"+
			"    regions: [%s]\n    min_quota_headroom: {CPUS: 1, INSTANCES: 1}\n%s",
			project, project, creds, compute.URL, strings.Join(regions, ", "), extra)
	}
	one := []string{"us-central1"}
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, "gcp:\n"+entry("hostile", hostileRegions, "")+entry("chatty", hostileRegions, "")+entry("good", one, "")+entry("nan", one, "")+
		entry("duplicate", one, "")+entry("down", []string{"us-central1", "us-east4"}, "")+
		entry("image", one, "    source_image: projects/debian-cloud/global/images/family/debian-12\n"))

	var logs syncBuffer
	cmd, _, addr := startExporterEnv(t, dir, &logs, []string{"PROVIDER_HEALTH_MEMORY_LIMIT=134217728"}, "--config.file="+cfgPath)
	// A guard far beyond any honest check, not a measure of speed.
	const header = 2 * time.Minute
	client := &http.Client{Timeout: header}
	get := func(path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", strconv.Itoa(int(header.Seconds())))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: no answer within the scrape timeout: %v\nlog:\n%.4000s", path, err, logs.String())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	startPeak := peakResidentBytes(t, cmd.Process.Pid)
	// Three live checks of every entry, and the pages that show them.
	var metrics, status string
	for range 3 {
		var code int
		if code, metrics = get("/metrics"); code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		if code, status = get("/api/v1/status"); code != http.StatusOK {
			t.Fatalf("/api/v1/status: %d", code)
		}
		if code, page := get("/"); code != http.StatusOK || len(page) > 1<<20 {
			t.Fatalf("/: %d, %d bytes", code, len(page))
		}
	}
	if n := regionRequests.Load(); n < 3*2*20 {
		t.Errorf("%d regions.get, want every region of both hostile entries asked in each of 3 checks", n)
	}

	peak := peakResidentBytes(t, cmd.Process.Pid)
	t.Logf("exporter peak RSS (VmHWM) after 3 checks of 20 regions × 4 MB and 20 × 200 KB warnings: %d MiB (%d MiB at start); /api/v1/status %d bytes; log %d bytes",
		peak>>20, startPeak>>20, len(status), len(logs.String()))
	if peak > 128<<20 {
		t.Errorf("peak RSS %d MiB, over the 128 MiB limit of a replica of up to 100 hosts", peak>>20)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the exporter is gone: %v", err)
	}

	for name, reason := range map[string]string{
		"hostile":   "BadResponse",
		"chatty":    "Ready",
		"good":      "Ready",
		"nan":       "Ready",
		"duplicate": "QuotaExhausted",
		"down":      "RegionDown",
		"image":     "ImageUnavailable",
	} {
		if !reasonIs(metrics, name, reason) {
			t.Errorf("%s: want reason %s", name, reason)
		}
	}
	// The NaN usage is not exported; the other metric of its region is.
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "provider_health_gcp_quota_") && strings.Contains(line, "NaN") {
			t.Errorf("a NaN quota series: %s", line)
		}
	}
	if !strings.Contains(metrics, `provider_health_gcp_quota_usage{metric="INSTANCES",name="nan",region="us-central1"} 3`) ||
		strings.Contains(metrics, `metric="CPUS",name="nan"`) {
		t.Error("nan: want the INSTANCES series and no CPUS series")
	}
	if !strings.Contains(metrics, `provider_health_gcp_quota_usage{metric="CPUS",name="duplicate",region="us-central1"} 24`) {
		t.Error("duplicate: want CPUS exported once, as its exhausted listing")
	}
	// No region of the hostile entries has quota data: no series.
	for _, name := range []string{"hostile", "chatty"} {
		if strings.Contains(metrics, `provider_health_gcp_quota_limit{metric="CPUS",name="`+name+`"`) {
			t.Errorf("%s: quota series without quota data", name)
		}
	}

	var st struct {
		Providers []struct {
			Name    string `json:"name"`
			Targets []struct {
				Reason  string            `json:"reason"`
				Message string            `json:"message"`
				Details map[string]string `json:"details"`
			} `json:"targets"`
		} `json:"providers"`
	}
	if err := json.Unmarshal([]byte(status), &st); err != nil {
		t.Fatalf("/api/v1/status: %v", err)
	}
	if len(st.Providers) != 7 {
		t.Errorf("/api/v1/status lists %d entries, want 7", len(st.Providers))
	}
	const bound = provider.MaxProviderString + 64 // the cut marker
	for _, p := range st.Providers {
		if len(p.Targets) != 1 {
			t.Fatalf("%s: %d targets", p.Name, len(p.Targets))
		}
		tg := p.Targets[0]
		if len(tg.Message) > bound {
			t.Errorf("%s: message of %d bytes", p.Name, len(tg.Message))
		}
		for k, v := range tg.Details {
			if len(v) > bound {
				t.Errorf("%s: details[%q] of %d bytes", p.Name, k, len(v))
			}
		}
		switch p.Name {
		case "hostile":
			if !strings.Contains(tg.Message, "region test-region1 of project hostile") ||
				!strings.Contains(tg.Message, "larger than the exporter's limit of 256 KiB for a region or an image") {
				t.Errorf("hostile: message %.300q, want the first region and the limit named", tg.Message)
			}
		case "chatty":
			if !strings.Contains(tg.Message, "no quota data for region test-region1: QUOTA_INFO_UNAVAILABLE: www") || !strings.Contains(tg.Message, "[cut: ") {
				t.Errorf("chatty: message %.300q, want the warning, cut", tg.Message)
			}
			if d := tg.Details["region test-region20"]; !strings.Contains(d, "[cut: ") {
				t.Errorf("chatty: details of test-region20 %.300q, want the warning, cut", d)
			}
		case "nan":
			if !strings.Contains(tg.Message, "quota CPUS for region us-central1 has usage NaN") {
				t.Errorf("nan: message %q, want the NaN named", tg.Message)
			}
		case "down":
			if tg.Message != "Compute reports region us-east4 DOWN: no instance can be placed there" {
				t.Errorf("down: message %q", tg.Message)
			}
		case "image":
			if !strings.Contains(tg.Message, "is OBSOLETE (replacement: ") {
				t.Errorf("image: message %q", tg.Message)
			}
		}
	}
	// Before, one status page carried 20 × 4 MB, and so did the log.
	if len(status) > 1<<20 {
		t.Errorf("/api/v1/status of %d bytes", len(status))
	}
	if n := len(logs.String()); n > 1<<20 {
		t.Errorf("the log holds %d bytes after 3 checks", n)
	}
}

// TestGCPTooManyRegionsRefused: an entry with 500 regions (once: 500
// requests in flight per check, and the process died) is refused at load
// and by --config.check, naming the key; the process does not start.
func TestGCPTooManyRegionsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	regions := make([]string, 500)
	for i := range regions {
		regions[i] = "test-region" + strconv.Itoa(i+1)
	}
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, "gcp:\n  - name: crawl-prod\n    project: crawl-prod-123\n    regions: ["+strings.Join(regions, ", ")+
		"]\n    min_quota_headroom: {CPUS: 8}\n")
	if _, err := config.Load(cfgPath, provider.Sections(builtinKinds())); err == nil || !strings.Contains(err.Error(), `gcp[0] "crawl-prod": regions: 500 regions, more than the 64`) {
		t.Fatalf("config.Load: %v, want the entry and regions named", err)
	}
	// The log quotes the entry's name; --config.check prints it as is.
	const want = `regions: 500 regions, more than the 64 an entry may check`
	for _, args := range [][]string{{"--config.check"}, {"--web.listen-address=127.0.0.1:0"}} {
		cmd := exec.Command(binary(t), append(args, "--config.file="+cfgPath)...)
		cmd.Env = append(os.Environ(), "HOME="+dir, "GCE_METADATA_HOST=127.0.0.1:1")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), want) {
			t.Errorf("%v: exit %v, output %s; want status 1 naming regions", args, err, out)
		}
	}
}

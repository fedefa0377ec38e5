package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The real binary's pages against a fleet too large to run for real: a
// thousand Kubernetes entries of one in-process fake API server that
// refuses every pod_template dry run with a message longer than the 4 KiB
// the exporter keeps (docs/security.md: "Strings, labels and pages").

// deploymentMemoryLimit is the memory limit of deploy/kubernetes's
// Deployment; the tests run the binary with PROVIDER_HEALTH_MEMORY_LIMIT
// set to it, as the Deployment does.
const deploymentMemoryLimit = 256 << 20

// fleetEntries is how many refused entries the fleet has, besides "good".
const fleetEntries = 1000

// refusingAPIServer lists no Pods and refuses every dry-run create with a
// webhook's denial of 8 KiB, full of what JSON and HTML escape.
func refusingAPIServer(t *testing.T) (srv *httptest.Server, dryRuns *atomic.Int64) {
	t.Helper()
	dryRuns = &atomic.Int64{}
	denial := `admission webhook "deny.egress.example.com" denied the request: ` +
		strings.Repeat(`<policy "no-proxies"> & rule 'egress' refused the Pod; `, 8<<10/56)
	status, err := json.Marshal(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"message": denial, "reason": "Forbidden", "code": 403})
	if err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pods"):
			_, _ = io.Copy(io.Discard, r.Body)
			dryRuns.Add(1)
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write(status)
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/pods"):
			_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, dryRuns
}

// startRefusedFleet starts the binary under the Deployment's memory limit
// with fleetEntries refused entries and "good" (no pod_template), and
// scrapes until every verdict is in.
func startRefusedFleet(t *testing.T) (fleet *runningExporter) {
	t.Helper()
	dir := t.TempDir()
	srv, _ := refusingAPIServer(t)
	kubeconfig := plainKubeconfig(t, dir, "fleet", srv.URL)
	pod := filepath.Join(dir, "proxy-pod.yaml")
	writeFile(t, pod, "apiVersion: v1\nkind: Pod\nmetadata:\n  generateName: proxy-\nspec:\n  containers:\n    - name: proxy\n      image: registry.example/proxy:1\n")
	var cfg strings.Builder
	// Checks that outlast a loaded machine's slowest moments: the test
	// is about memory, not speed.
	cfg.WriteString("defaults:\n  timeout: 90s\nkubernetes:\n  - name: good\n    kubeconfig: " + kubeconfig + "\n")
	for i := range fleetEntries {
		fmt.Fprintf(&cfg, "  - name: dry-%04d\n    kubeconfig: %s\n    namespace: proxies\n    pod_template: %s\n", i, kubeconfig, pod)
	}
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, cfg.String())
	fleet = &runningExporter{t: t}
	fleet.cmd, fleet.exited, fleet.addr = startExporterEnv(t, dir, &fleet.logs,
		[]string{fmt.Sprintf("PROVIDER_HEALTH_MEMORY_LIMIT=%d", deploymentMemoryLimit)}, "--config.file="+cfgPath)
	fleet.s = scraper{t: t, addr: fleet.addr, header: 2 * time.Minute, logs: &fleet.logs}
	fleet.checkVerdicts()
	return fleet
}

// runningExporter is a started binary and a scraper of it.
type runningExporter struct {
	t      *testing.T
	cmd    *exec.Cmd
	exited chan error
	addr   string
	logs   syncBuffer
	s      scraper
}

// checkVerdicts scrapes /metrics inside its scrape timeout header and
// checks every entry's verdict: good Ready, every other AdmissionDenied.
func (e *runningExporter) checkVerdicts() {
	e.t.Helper()
	code, metrics := e.s.get("/metrics")
	if code != http.StatusOK {
		e.t.Fatalf("/metrics: %d %.300s", code, metrics)
	}
	got := map[string]string{}
	for line := range strings.Lines(metrics) {
		if !strings.HasPrefix(line, "provider_health_reason{") || !strings.HasSuffix(line, " 1\n") {
			continue
		}
		_, name, _ := strings.Cut(line, `name="`)
		name, _, _ = strings.Cut(name, `"`)
		_, reason, _ := strings.Cut(line, `reason="`)
		reason, _, _ = strings.Cut(reason, `"`)
		got[name] = reason
	}
	bad := 0
	for i := range fleetEntries {
		if r := got[fmt.Sprintf("dry-%04d", i)]; r != "AdmissionDenied" {
			if bad++; bad <= 5 {
				e.t.Errorf("dry-%04d: reason %q, want AdmissionDenied", i, r)
			}
		}
	}
	if got["good"] != "Ready" {
		e.t.Errorf("good: reason %q, want Ready", got["good"])
	}
}

// pageCase is a page of the fleet and what its answer must hold.
type pageCase struct {
	path  string
	check func(t *testing.T, body string)
}

// fleetPages are the pages that answer from every target or the whole
// file, and the debug probe.
var fleetPages = []pageCase{
	{"/api/v1/status", func(t *testing.T, body string) {
		st := statusTargets(t, body)
		if len(st) != fleetEntries+1 || st["good"].Reason != "Ready" || st["dry-0999"].Reason != "AdmissionDenied" ||
			!strings.Contains(st["dry-0999"].Details["dryRun"], "<policy") {
			t.Errorf("/api/v1/status: %d entries, good %q, dry-0999 %q", len(st), st["good"].Reason, st["dry-0999"].Reason)
		}
	}},
	{"/", func(t *testing.T, body string) {
		if !strings.Contains(body, `data-name="dry-0999"`) || !strings.HasSuffix(strings.TrimSpace(body), "</html>") ||
			strings.Count(body, `<tr class="notready"`) != fleetEntries {
			t.Errorf("/: %d bytes, not every refused entry's row", len(body))
		}
	}},
	{"/sd", func(t *testing.T, body string) {
		var groups []sdGroup
		if err := json.Unmarshal([]byte(body), &groups); err != nil || len(groups) != fleetEntries+1 {
			t.Errorf("/sd: %d groups, %v", len(groups), err)
		}
	}},
	{"/config", func(t *testing.T, body string) {
		if !strings.Contains(body, "name: dry-0999") {
			t.Errorf("/config lacks the last entry")
		}
	}},
	{"/probe?name=dry-0500&debug=true", func(t *testing.T, body string) {
		if !strings.Contains(body, "Verdict for kubernetes/dry-0500/") || !strings.Contains(body, "AdmissionDenied") {
			t.Errorf("debug probe: %.500s", body)
		}
	}},
}

// TestPagesStreamUnderTheDeploymentLimit: forty requests at once (the
// default --web.max-requests) of each page of a thousand entries whose dry
// runs are refused with 4 KiB messages grow the peak resident size by less
// than 128 MiB and keep it under the Deployment's limit; so do clients that
// ask for the largest pages and stop reading. Before, one /api/v1/status
// answer was 16 MB built whole, and forty of them ended the process with
// "fatal error: out of memory".
func TestPagesStreamUnderTheDeploymentLimit(t *testing.T) {
	// Not parallel: its peak must be its own, and its load must not eat
	// other tests' scrape budgets.
	e := startRefusedFleet(t)
	before := peakResidentBytes(t, e.cmd.Process.Pid)
	t.Logf("peak RSS (VmHWM) with the fleet checked: %.1f MiB", float64(before)/(1<<20))
	const clients = 40
	for _, page := range fleetPages {
		bodies := make([]string, clients)
		var wg sync.WaitGroup
		for i := range bodies {
			wg.Go(func() {
				code, body := e.s.get(page.path)
				if code != http.StatusOK {
					t.Errorf("%s: %d %.200s", page.path, code, body)
				}
				bodies[i] = body
			})
		}
		wg.Wait()
		page.check(t, bodies[0])
		t.Logf("%s: %d bytes; peak RSS now %.1f MiB", page.path, len(bodies[0]), float64(peakResidentBytes(t, e.cmd.Process.Pid))/(1<<20))
	}

	// Clients that ask and never read: each holds what the kernel's socket
	// buffers take and the server's small write buffer, until the write
	// deadline.
	var stalled []net.Conn
	for i := range clients / 2 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, c)
		path := fleetPages[i%2].path
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: exporter\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	// Each stalled answer has started (a status line came back) before
	// the memory is read.
	for _, c := range stalled {
		line, err := bufio.NewReaderSize(c, 16).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("a stalled client's answer: %q %v", line, err)
		}
	}
	e.checkVerdicts()
	after := peakResidentBytes(t, e.cmd.Process.Pid)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.cmd.Process.Pid)); err == nil {
		for line := range strings.Lines(string(b)) {
			// What the Go runtime's limit counts, and the binary's code.
			if strings.HasPrefix(line, "RssAnon:") || strings.HasPrefix(line, "RssFile:") {
				t.Logf("%s", strings.TrimSpace(line))
			}
		}
	}
	t.Logf("peak RSS (VmHWM) after %d requests of each page and %d stalled clients: %.1f MiB (+%.1f MiB)",
		clients, len(stalled), float64(after)/(1<<20), float64(after-before)/(1<<20))
	if after-before > 128<<20 {
		t.Errorf("the pages grew the peak RSS by %d MiB, want less than 128 MiB", (after-before)>>20)
	}
	if after > deploymentMemoryLimit {
		t.Errorf("peak RSS %d MiB, over the Deployment's limit of %d MiB", after>>20, deploymentMemoryLimit>>20)
	}
	for _, c := range stalled {
		c.Close()
	}
	select {
	case err := <-e.exited:
		e.exited <- err
		t.Fatalf("the exporter exited: %v\nlog:\n%.4000s", err, e.logs.String())
	default:
	}
}

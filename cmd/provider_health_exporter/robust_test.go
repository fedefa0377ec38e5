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
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The real binary against what a broken or hostile API server or client
// sends through the newest surfaces (docs/security.md: "Strings, labels
// and pages"): each test asserts that the process stays up, its peak
// resident size (VmHWM) stays under memoryLimit, /metrics
// answers inside its scrape timeout header, the affected target has a
// clear reason and a bounded message, and the others keep their verdicts.

// memoryLimit is the bound these tests hold the exporter to: half the
// Deployment's memory limit (256 MiB, deploy/kubernetes and the chart), so
// a hostile peer is far from an OOM kill, not merely short of one.
const memoryLimit = 128 << 20

// peakResidentBytes is the process's peak resident set size (VmHWM): what
// an OOM killer with the limit would have seen at the worst moment.
func peakResidentBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// assertAliveAndSmall checks that the process has not exited and that its
// peak resident size is under memoryLimit, and reports the figure.
func assertAliveAndSmall(t *testing.T, cmd *exec.Cmd, exited chan error, logs fmt.Stringer) {
	t.Helper()
	select {
	case err := <-exited:
		exited <- err
		t.Fatalf("the exporter exited: %v\nlog:\n%.4000s", err, logs.String())
	default:
	}
	peak := peakResidentBytes(t, cmd.Process.Pid)
	t.Logf("peak RSS (VmHWM) of the exporter: %.1f MiB", float64(peak)/(1<<20))
	if peak > memoryLimit {
		t.Errorf("peak RSS %d MiB, over %d MiB (half the Deployment's limit)", peak>>20, memoryLimit>>20)
	}
}

// scraper gets paths of the exporter at addr with a scrape timeout header
// of header: an answer must come inside it.
type scraper struct {
	t      *testing.T
	addr   string
	header time.Duration
	logs   fmt.Stringer
}

func (s scraper) get(path string) (int, string) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+s.addr+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set(engine.ScrapeTimeoutHeader, strconv.Itoa(int(s.header.Seconds())))
	resp, err := (&http.Client{Timeout: s.header}).Do(req)
	if err != nil {
		s.t.Fatalf("GET %s: no answer within the %v scrape timeout: %v\nlog:\n%.4000s", path, s.header, err, s.logs.String())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// The protobuf encodings a fake API server answers with: written field by
// field, so that they can hold what resource.Quantity and a label cannot.
func pbBytes(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func pbQuantities(b []byte, num protowire.Number, m map[string]string) []byte {
	for k, v := range m {
		b = pbBytes(b, num, pbBytes(pbBytes(nil, 1, []byte(k)), 2, pbBytes(nil, 1, []byte(v))))
	}
	return b
}

// pbAnswer wraps a kind's encoding in the API server's envelope.
func pbAnswer(t *testing.T, kind string, raw []byte) []byte {
	t.Helper()
	b, err := (&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: kind}, Raw: raw}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("k8s\x00"), b...)
}

// testQuota is a ResourceQuota of the fake API server: hard and used.
type testQuota struct {
	name       string
	hard, used map[string]string
}

// pbQuotaList is a ResourceQuotaList (core/v1 generated.proto: items 2;
// metadata 1 with name 1; spec 2 with hard 1; status 3 with hard 1, used 2).
func pbQuotaList(t *testing.T, quotas ...testQuota) []byte {
	t.Helper()
	list := pbBytes(nil, 1, nil)
	for _, q := range quotas {
		rq := pbBytes(nil, 1, pbBytes(nil, 1, []byte(q.name)))
		rq = pbBytes(rq, 2, pbQuantities(nil, 1, q.hard))
		rq = pbBytes(rq, 3, pbQuantities(pbQuantities(nil, 1, q.hard), 2, q.used))
		list = pbBytes(list, 2, rq)
	}
	return pbAnswer(t, "ResourceQuotaList", list)
}

// pbPodList is a PodList of one Pod whose container requests cpu (PodSpec
// containers 2, Container resources 8, requests 2).
func pbPodList(t *testing.T, cpu string) []byte {
	t.Helper()
	container := pbBytes(pbBytes(nil, 1, []byte("proxy")), 8, pbQuantities(nil, 2, map[string]string{"cpu": cpu}))
	pod := pbBytes(pbBytes(nil, 1, pbBytes(nil, 1, []byte("proxy-0"))), 2, pbBytes(nil, 2, container))
	return pbAnswer(t, "PodList", pbBytes(pbBytes(nil, 1, nil), 2, pod))
}

func writePB(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
	_, _ = w.Write(b)
}

const testNamespace = "egress-proxies"

// hostileAPIServer serves one API server per path prefix (the kubeconfig's
// server URL carries it): /<case>/api/v1/pods and so on.
func hostileAPIServer(t *testing.T) *httptest.Server {
	t.Helper()
	reason60k := strings.Repeat("denied by a webhook that explains itself at length. ", 60<<10/52)
	reason4m := strings.Repeat("x", 4<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		switch {
		case rest == "api/v1/pods" && c == "podquantity":
			writePB(w, pbPodList(t, "1e-1000000000"))
		case rest == "api/v1/pods":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`)
		case rest == "api/v1/namespaces/"+testNamespace+"/resourcequotas":
			compute := testQuota{"compute", map[string]string{"pods": "10"}, map[string]string{"pods": "2"}}
			switch c {
			case "utf8":
				writePB(w, pbQuotaList(t, compute, testQuota{"q\xff\xfe", map[string]string{"pods": "10"}, map[string]string{"pods": "3"}}))
			case "huge":
				writePB(w, pbQuotaList(t, compute, testQuota{"vast", map[string]string{"pods": "1e1000000000"}, map[string]string{"pods": "1"}}))
			case "tiny":
				writePB(w, pbQuotaList(t, testQuota{"tiny", map[string]string{"pods": "10"}, map[string]string{"pods": "1e-1000000000"}}))
			default:
				http.NotFound(w, r)
			}
		case rest == "apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
			var rev map[string]any
			if err := json.NewDecoder(r.Body).Decode(&rev); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			reason := reason60k
			if c == "reviews4m" {
				reason = reason4m
			}
			rev["status"] = map[string]any{"allowed": false, "reason": reason}
			b, _ := json.Marshal(rev)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// plainKubeconfig is a kubeconfig for server without credentials.
func plainKubeconfig(t *testing.T, dir, name, server string) string {
	t.Helper()
	p := filepath.Join(dir, name+"-kubeconfig")
	writeFile(t, p, "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: "+server+
		"\ncontexts:\n- name: c\n  context: {cluster: c}\n")
	return p
}

// statusTargets reads /api/v1/status into entry name → its one target.
func statusTargets(t *testing.T, body string) map[string]statusTarget {
	t.Helper()
	var st struct {
		Providers []statusProvider `json:"providers"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("status: %v\n%.2000s", err, body)
	}
	out := map[string]statusTarget{}
	for _, p := range st.Providers {
		if len(p.Targets) > 0 {
			out[p.Name] = p.Targets[0]
		}
	}
	return out
}

// TestHostileKubernetesAnswers: an API server that answers a quota name
// that is not UTF-8 in protobuf, quantities no cluster could mean (in a
// quota and in a Pod), access reviews whose reasons are 60 KiB or 4 MB,
// twenty of them per check. Before, the first panicked the process in a
// goroutine without recover, the quantities kept a core busy after the
// check or hung the decoder, and the reasons multiplied into every page.
func TestHostileKubernetesAnswers(t *testing.T) {
	// Not parallel: the load it puts on the machine must not eat the
	// scrape budgets of the tests that measure answers in time.
	dir := t.TempDir()
	srv := hostileAPIServer(t)
	var canI []string
	for i := range 20 {
		canI = append(canI, fmt.Sprintf("create pods%d", i))
	}
	canIList := "[" + strings.Join(canI, ", ") + "]"
	entry := func(name, extra string) string {
		return fmt.Sprintf("  - name: %s\n    kubeconfig: %s\n%s", name, plainKubeconfig(t, dir, name, srv.URL+"/"+name), extra)
	}
	quota := "    namespace: " + testNamespace + "\n    min_quota_headroom: {pods: 1}\n"
	reviews := "    namespace: " + testNamespace + "\n    can_i: " + canIList + "\n"
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, "kubernetes:\n"+entry("good", "")+entry("utf8", quota)+entry("huge", quota)+entry("tiny", quota)+
		entry("podquantity", "")+entry("reviews", reviews)+entry("reviews4m", reviews))

	var logs syncBuffer
	cmd, exited, addr := startExporter(t, dir, &logs, "--config.file="+cfgPath)
	s := scraper{t: t, addr: addr, header: 10 * time.Second, logs: &logs}

	var metrics string
	for range 2 {
		code, body := s.get("/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d %.2000s", code, body)
		}
		metrics = body
	}
	for name, reason := range map[string]string{
		"good": "Ready", "utf8": "Ready", "huge": "BadResponse", "tiny": "BadResponse",
		"podquantity": "Ready", "reviews": "Forbidden", "reviews4m": "BadResponse",
	} {
		if !reasonIs(metrics, name, reason) {
			t.Errorf("%s: want reason %s", name, reason)
		}
	}
	// The quota with a valid name has its series; the other none.
	if !strings.Contains(metrics, `provider_health_kubernetes_quota_hard{name="utf8",namespace="egress-proxies",quota="compute",resource="pods"} 10`) {
		t.Errorf("utf8: the valid quota's series is missing")
	}
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "provider_health_kubernetes_quota_") && strings.Contains(line, `name="utf8"`) && !strings.Contains(line, `quota="compute"`) {
			t.Errorf("a series of the quota whose name is not UTF-8: %q", line)
		}
		if strings.HasPrefix(line, "provider_health_exporter_checks_abandoned_total{") && !strings.HasSuffix(strings.TrimSpace(line), " 0") {
			t.Errorf("a check outlived its deadline: %s", line)
		}
	}
	if n := strings.Count(logs.String(), "quota name is no valid label value"); n != 1 {
		t.Errorf("the dropped quota name was logged %d times over two scrapes, want once", n)
	}

	// Ten status pages at once: each small, every message bounded.
	var wg sync.WaitGroup
	bodies := make([]string, 10)
	for i := range bodies {
		wg.Go(func() {
			code, body := s.get("/api/v1/status")
			if code != http.StatusOK {
				t.Errorf("/api/v1/status: %d", code)
			}
			bodies[i] = body
		})
	}
	wg.Wait()
	if len(bodies[0]) > 256<<10 {
		t.Errorf("/api/v1/status of %d KiB", len(bodies[0])>>10)
	}
	st := statusTargets(t, bodies[0])
	for name, want := range map[string]string{
		"huge":      `quota vast in namespace egress-proxies: hard pods: quantity "1e1000000000": magnitude beyond 10^±64`,
		"tiny":      `used pods: quantity "1e-1000000000": magnitude beyond 10^±64`,
		"reviews":   "cannot create pods0 in namespace egress-proxies: denied by a webhook",
		"reviews4m": "larger than the exporter's limit of 64 KiB",
	} {
		m := st[name].Message
		if !strings.Contains(m, want) || len(m) > provider.MaxProviderString+64 {
			t.Errorf("%s: message of %d bytes %.300q, want one with %q of at most %d", name, len(m), m, want, provider.MaxProviderString+64)
		}
	}
	if code, page := s.get("/"); code != http.StatusOK || len(page) > 256<<10 {
		t.Errorf("/: %d, %d KiB", code, len(page)>>10)
	}
	assertAliveAndSmall(t, cmd, exited, &logs)
}

// TestPagesAreBounded: without --web.external-url, twenty /sd requests at
// once with a Host of a megabyte, against 5,000 KVM hosts: each is a 400
// (before, one of them returned 104 MB); a valid Host is copied into every
// group. Then forty /config requests at once of that 5,000-host file: one
// rendering, the same bytes to every one (before, 60-70 MB each).
func TestPagesAreBounded(t *testing.T) {
	// Not parallel: the load it puts on the machine must not eat the
	// scrape budgets of the tests that measure answers in time.
	dir := t.TempDir()
	// A key that does not parse: every host's check ends at its first
	// stage, without network traffic.
	writeFile(t, filepath.Join(dir, "key"), "not a key")
	var cfg strings.Builder
	cfg.WriteString("kvm:\n  - name: fleet\n    user: proxyops\n    private_key_file: key\n    insecure_ignore_host_key: true\n    hosts:\n")
	for i := range 5000 {
		fmt.Fprintf(&cfg, "      - address: 10.%d.%d.%d:22\n        name: proxy-host-%04d\n", i>>16&255, i>>8&255, i&255, i)
	}
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, cfg.String())
	var logs syncBuffer
	cmd, exited, addr := startExporter(t, dir, &logs, "--config.file="+cfgPath)
	s := scraper{t: t, addr: addr, header: 20 * time.Second, logs: &logs}

	hugeHost := strings.Repeat("h", 1_000_000)
	codes := make([]int, 20)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/sd", nil)
			if err != nil {
				t.Error(err)
				return
			}
			req.Host = hugeHost
			resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
			if err != nil {
				// The server answered 431 and closed the connection while
				// the client was still sending: its write broke.
				codes[i] = http.StatusRequestHeaderFieldsTooLarge
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
			if len(b) > 1<<10 {
				t.Errorf("/sd with a 1 MB Host answered %d bytes", len(b))
			}
		})
	}
	wg.Wait()
	// net/http refuses a header over 64 KiB before any handler runs: 431,
	// or a connection closed under a client still sending it.
	for i, c := range codes {
		if c != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("/sd with a 1 MB Host #%d: %d, want 431", i, c)
		}
	}
	// Under that, a Host that is no host[:port] of at most 262 bytes
	// cannot be the exporter's address: 400, and nothing copied.
	for _, host := range []string{strings.Repeat("h", 10_000), "exporter:9877/x", "exporter:0"} {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/sd", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || len(b) > 1<<10 || !strings.Contains(string(b), "--web.external-url") {
			t.Errorf("/sd with Host %.20q…: %d %.200s, want a short 400", host, resp.StatusCode, b)
		}
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/sd", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "exporter.monitoring.svc:9877"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var groups []sdGroup
	err = json.NewDecoder(resp.Body).Decode(&groups)
	resp.Body.Close()
	if err != nil || len(groups) != 5000 || groups[0].Targets[0] != "exporter.monitoring.svc:9877" {
		t.Errorf("/sd with a valid Host: %d groups, %v", len(groups), err)
	}

	texts := make([]string, 40)
	for i := range texts {
		wg.Go(func() {
			code, body := s.get("/config")
			if code != http.StatusOK {
				t.Errorf("/config: %d %.200s", code, body)
			}
			texts[i] = body
		})
	}
	wg.Wait()
	for _, text := range texts[1:] {
		if text != texts[0] {
			t.Fatal("forty /config answers of one configuration differ")
		}
	}
	if !strings.Contains(texts[0], "proxy-host-4999") {
		t.Errorf("/config lacks the last host")
	}

	// One host's scrape: a scrape of all 5,000 at once is the fleet
	// sizing of docs/scaling.md, not a bound of these pages.
	code, metrics := s.get("/probe?name=fleet&target=proxy-host-0042")
	if code != http.StatusOK || !reasonIs(metrics, "fleet", "SSHMaterialInvalid") {
		t.Errorf("/probe: %d, the host not SSHMaterialInvalid", code)
	}
	if code, _ := s.get("/metrics?collect[]=exporter"); code != http.StatusOK {
		t.Errorf("/metrics: %d", code)
	}
	assertAliveAndSmall(t, cmd, exited, &logs)
}

// TestEveryPageCountsAgainstMaxRequests: with --web.max-requests=1 held by
// a probe whose API server does not answer, every page that builds an
// answer is a 503; health and readiness still answer.
func TestEveryPageCountsAgainstMaxRequests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(arrived) })
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","items":[]}`)
	}))
	t.Cleanup(stuck.Close)
	defer close(release)
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, "kubernetes:\n  - name: stuck\n    timeout: 5m\n    kubeconfig: "+plainKubeconfig(t, dir, "stuck", stuck.URL)+"\n")
	var logs syncBuffer
	cmd, exited, addr := startExporter(t, dir, &logs, "--config.file="+cfgPath, "--web.max-requests=1")

	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		if resp, err := (&http.Client{Timeout: 10 * time.Minute}).Get("http://" + addr + "/probe?name=stuck"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	select {
	case <-arrived: // the probe holds the one slot, its check waits on the API server
	case <-time.After(5 * time.Minute):
		t.Fatalf("the probe's request never reached the API server; log:\n%s", logs.String())
	}
	for _, path := range []string{"/sd", "/config", "/", "/api/v1/status", "/metrics", "/probe?name=stuck"} {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "exporter:9877"
		resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "--web.max-requests=1") {
			t.Errorf("GET %s while the one slot is taken: %d %.200s, want 503", path, resp.StatusCode, b)
		}
	}
	for _, path := range []string{"/-/healthy", "/-/ready"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
	}
	assertAliveAndSmall(t, cmd, exited, &logs)
}

// TestReloadDropsChangedVerdicts: a reload that changes an entry's
// minimum shows that entry as not checked yet (its old verdict spoke of
// the old minimum); an unchanged entry keeps its verdict.
func TestReloadDropsChangedVerdicts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := hostileAPIServer(t)
	cfgPath := filepath.Join(dir, "provider_health.yml")
	write := func(minimum string) {
		writeFile(t, cfgPath, "kubernetes:\n"+
			"  - name: utf8\n    kubeconfig: "+plainKubeconfig(t, dir, "utf8", srv.URL+"/utf8")+"\n    namespace: "+testNamespace+"\n    min_quota_headroom: {pods: "+minimum+"}\n"+
			"  - name: good\n    kubeconfig: "+plainKubeconfig(t, dir, "good", srv.URL+"/good")+"\n")
	}
	write("1")
	var logs syncBuffer
	cmd, exited, addr := startExporter(t, dir, &logs, "--config.file="+cfgPath)
	s := scraper{t: t, addr: addr, header: 10 * time.Second, logs: &logs}
	if code, body := s.get("/metrics"); code != http.StatusOK || !reasonIs(body, "utf8", "Ready") {
		t.Fatalf("/metrics: %d, utf8 not Ready", code)
	}
	_, body := s.get("/api/v1/status")
	before := statusTargets(t, body)

	write("100")
	resp, err := (&http.Client{Timeout: time.Minute}).Post("http://"+addr+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: %s", resp.Status)
	}
	_, body = s.get("/api/v1/status")
	after := statusTargets(t, body)
	if c := after["utf8"]; c.Checked || c.LastCheckTime != nil {
		t.Errorf("changed entry after reload: checked %v, reason %q; want not checked yet", c.Checked, c.Reason)
	}
	if g := after["good"]; !g.Checked || g.Reason != "Ready" || !g.LastCheckTime.Equal(*before["good"].LastCheckTime) {
		t.Errorf("unchanged entry after reload: %+v; want its verdict", g)
	}
	if code, body := s.get("/metrics"); code != http.StatusOK || !reasonIs(body, "utf8", "QuotaExhausted") {
		t.Errorf("after the reload: %d, utf8 not QuotaExhausted against the new minimum", code)
	}
	assertAliveAndSmall(t, cmd, exited, &logs)
}

// TestPprofWithoutWebConfig: --web.enable-pprof without --web.config.file
// starts on loopback with a warning, and refuses to start on any other
// address, naming both flags.
func TestPprofWithoutWebConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, "kvm: []\n")

	var out syncBuffer
	refused := exec.Command(binary(t), "--config.file="+cfgPath, "--web.enable-pprof", "--web.listen-address=:0")
	refused.Stdout, refused.Stderr = &out, &out
	var exit *exec.ExitError
	if err := refused.Run(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("on every interface: exit %v, want 1", err)
	}
	if !strings.Contains(out.String(), "--web.enable-pprof without --web.config.file on :0, which is not loopback") || strings.Contains(out.String(), "Listening on") {
		t.Errorf("on every interface: log lacks the refusal, or it listened:\n%s", out.String())
	}

	var logs syncBuffer
	cmd, exited, addr := startExporter(t, dir, &logs, "--config.file="+cfgPath, "--web.enable-pprof")
	if !strings.Contains(logs.String(), "served unauthenticated to every local user") {
		t.Errorf("on loopback: no warning in the log:\n%s", logs.String())
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("on loopback: /debug/pprof/cmdline %d", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	exited <- nil
}

package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestNothingReadCanHangOrExhaust runs the real binary against peers and
// files that would hang or exhaust a naive reader — an endless Compute
// body, a Compute that redirects elsewhere, a kubeconfig and an SSH key
// turned into named pipes, an exec plugin that never exits — plus 160
// connections holding half a request header. Every endpoint answers within
// the scrape's timeout, each affected target says what is wrong, the
// healthy one stays Ready, the process stays under 128 MiB, the memory
// limit of a replica of up to 100 hosts, handed to it as that replica's is
// (PROVIDER_HEALTH_MEMORY_LIMIT; docs/scaling.md: "Sizing"), and a reload and SIGTERM still complete (docs/security.md: "What the
// exporter bounds").
func TestNothingReadCanHangOrExhaust(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"test-token","expires_in":3599,"token_type":"Bearer"}`)
	}))
	t.Cleanup(tokens.Close)
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"compute#instanceAggregatedList","items":{}}`)
	}))
	t.Cleanup(good.Close)
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"compute#instanceAggregatedList","items":{"zones/a":{"instances":[`)
		chunk := []byte(strings.Repeat(`{"name":"proxy","status":"RUNNING"},`, 1000))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(endless.Close)
	var stolen atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { stolen.Add(1) }))
	t.Cleanup(elsewhere.Close)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.RequestURI(), http.StatusFound)
	}))
	t.Cleanup(redirect.Close)
	// A complete body, but far over any list the check asks for.
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"compute#instanceAggregatedList","items":{"zones/a":{"instances":[`)
		for i := range 200_000 {
			if i > 0 {
				_, _ = io.WriteString(w, ",")
			}
			_, _ = io.WriteString(w, `{"name":"proxy","status":"RUNNING"}`)
		}
		_, _ = io.WriteString(w, `]}}}`)
	}))
	t.Cleanup(huge.Close)
	// An endless body that trickles: only the deadline ends it.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"compute#instanceAggregatedList","items":{"zones/a":{"instances":[`)
		for {
			if _, err := io.WriteString(w, `{"name":"proxy"},`); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(slow.Close)
	// An apiserver that ignores limit=1 and streams Pods without end.
	pods := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[`)
		chunk := []byte(strings.Repeat(`{"metadata":{"name":"proxy","namespace":"default"}},`, 1000))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(pods.Close)
	// A well-behaved apiserver that wants the token an exec plugin prints.
	apiserver := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer from-plugin" {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`)
	}))
	t.Cleanup(apiserver.Close)

	creds := filepath.Join(dir, "gcp.json")
	writeFile(t, creds, serviceAccountJSON(t, tokens.URL+"/token"))
	kubeconfig := func(name, user string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"+
			"contexts:\n- name: c\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user:\n"+user)
		return p
	}
	pipeKubeconfig := kubeconfig("pipe-kubeconfig", "    token: t\n")
	pluginDir := filepath.Join(dir, "plugin")
	if err := os.Mkdir(pluginDir, 0o700); err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(pluginDir, "plugin.sh")
	writeExecutable(t, plugin, "#!/bin/sh\necho $$ > "+filepath.Join(pluginDir, "pid")+"\nexec sleep 1000\n")
	execUser := func(command string) string {
		return "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: " + command + "\n      interactiveMode: Never\n"
	}
	pluginKubeconfig := kubeconfig("plugin-kubeconfig", execUser(plugin))
	chatty := filepath.Join(pluginDir, "chatty.sh")
	writeExecutable(t, chatty, "#!/bin/sh\nhead -c 100000000 /dev/zero\n")
	chattyKubeconfig := kubeconfig("chatty-kubeconfig", execUser(chatty))
	runs := filepath.Join(pluginDir, "runs")
	expiring := filepath.Join(pluginDir, "expiring.sh")
	writeExecutable(t, expiring, "#!/bin/sh\necho run >> "+runs+"\n"+
		`echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-plugin","expirationTimestamp":"`+
		time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}}'`+"\n")
	caData := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: apiserver.Certificate().Raw}))
	expiringKubeconfig := filepath.Join(dir, "expiring-kubeconfig")
	writeFile(t, expiringKubeconfig, "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: "+apiserver.URL+
		"\n    certificate-authority-data: "+caData+"\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user:\n"+execUser(expiring))
	podsKubeconfig := filepath.Join(dir, "pods-kubeconfig")
	writeFile(t, podsKubeconfig, "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: "+pods.URL+
		"\ncontexts:\n- name: c\n  context: {cluster: c}\n")
	pipeCreds := filepath.Join(dir, "pipe-gcp.json")
	writeFile(t, pipeCreds, serviceAccountJSON(t, tokens.URL+"/token"))
	// A credentials file of 1 GiB (sparse: it costs no disk) and a token
	// file that is /dev/zero: read whole, either would exhaust memory.
	sparseCreds := filepath.Join(dir, "sparse-gcp.json")
	writeFile(t, sparseCreds, serviceAccountJSON(t, tokens.URL+"/token"))
	zeroToken := filepath.Join(dir, "zero-token")
	writeFile(t, zeroToken, "t")
	zeroKubeconfig := kubeconfig("zero-kubeconfig", "    tokenFile: "+zeroToken+"\n")
	key := filepath.Join(dir, "key")
	writeFile(t, key, "not yet a pipe")
	gcp := func(name, endpoint, creds string) string {
		return fmt.Sprintf("  - name: %s\n    project: crawl-prod-123\n    credentials_file: %s\n    endpoint: %s\n", name, creds, endpoint)
	}
	kube := func(name, kubeconfig string) string {
		return fmt.Sprintf("  - name: %s\n    kubeconfig: %s\n", name, kubeconfig)
	}
	cfgPath := filepath.Join(dir, "provider_health.yml")
	cfg := "gcp:\n" + gcp("good", good.URL, creds) + gcp("endless", endless.URL, creds) + gcp("redirect", redirect.URL, creds) +
		gcp("huge", huge.URL, creds) + gcp("slow", slow.URL, creds) + gcp("pipe-creds", good.URL, pipeCreds) + gcp("sparse-creds", good.URL, sparseCreds) +
		"kubernetes:\n" + kube("pipe", pipeKubeconfig) + kube("plugin", pluginKubeconfig) + kube("chatty", chattyKubeconfig) +
		kube("expiring", expiringKubeconfig) + kube("pods", podsKubeconfig) + kube("zero-token", zeroKubeconfig) +
		"kvm:\n  - name: lab\n    user: proxyops\n    private_key_file: " + key + "\n    insecure_ignore_host_key: true\n    hosts:\n      - address: 127.0.0.1:1\n        name: h\n"
	writeFile(t, cfgPath, cfg)

	var logs syncBuffer
	cmd, exited, addr := startExporterEnv(t, dir, &logs, []string{"PROVIDER_HEALTH_MEMORY_LIMIT=134217728"}, "--config.file="+cfgPath)
	// Loaded: now files turn into named pipes, a huge file and a symlink to
	// /dev/zero, as a stalled mount or a mistake would.
	for _, p := range []string{pipeKubeconfig, key, pipeCreds} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Truncate(sparseCreds, 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(zeroToken); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", zeroToken); err != nil {
		t.Fatal(err)
	}

	const header = 5 * time.Second
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
			t.Fatalf("GET %s: no answer within the scrape timeout: %v\nlog:\n%s", path, err, logs.String())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// 160 connections (4 × --web.max-requests) hold half a header.
	for range maxConnections(40) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Half: ")
	}

	for range 2 {
		for _, path := range []string{"/metrics", "/", "/api/v1/status"} {
			if code, body := get(path); code != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, code, body)
			}
		}
	}
	_, metrics := get("/metrics")
	for name, reason := range map[string]string{
		"good":         "Ready",
		"endless":      "BadResponse",
		"redirect":     "BadResponse",
		"huge":         "BadResponse",
		"slow":         "Timeout",
		"pipe-creds":   "CredentialsUnavailable",
		"sparse-creds": "CredentialsUnavailable",
		"zero-token":   "CredentialsUnavailable",
		"pipe":         "CredentialsUnavailable",
		"plugin":       "Timeout",
		"chatty":       "CredentialsUnavailable",
		"expiring":     "Ready",
		"pods":         "BadResponse",
		"lab":          "SSHMaterialInvalid",
	} {
		if !reasonIs(metrics, name, reason) {
			t.Errorf("%s: want reason %s", name, reason)
		}
	}
	_, status := get("/api/v1/status")
	for _, want := range []string{"limit of 4 MiB", "302", elsewhere.URL, "not a regular file (a named pipe)", "a character device", "larger than"} {
		if !strings.Contains(status, want) {
			t.Errorf("status lacks %q:\n%s", want, status)
		}
	}
	// Three scrapes, one run of the plugin whose token has not expired.
	if b, err := os.ReadFile(runs); err != nil || strings.Count(string(b), "run") != 1 {
		t.Errorf("the expiring plugin ran %q times (err %v), want once", b, err)
	}
	if n := stolen.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
	// The plugin was killed with the check that ran it.
	if b, err := os.ReadFile(filepath.Join(pluginDir, "pid")); err == nil {
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		waitProcessGone(t, pid)
	} else {
		t.Errorf("the exec plugin never ran: %v", err)
	}
	rss := residentBytes(t, cmd.Process.Pid)
	t.Logf("exporter RSS after the hostile scrapes: %d MiB", rss>>20)
	if rss > 128<<20 {
		t.Errorf("RSS %d MiB, over the 128 MiB limit of a replica of up to 100 hosts", rss>>20)
	}

	// A reload completes: refused, since the configuration names a
	// named pipe now, with an error that says so; the old one runs on.
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Post("http://"+addr+"/-/reload", "", nil)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), "not a regular file") {
		t.Errorf("reload: %s %s, want 500 naming the named pipe", resp.Status, body)
	}
	if code, _ := get("/metrics"); code != http.StatusOK {
		t.Errorf("after the refused reload: /metrics %d", code)
	}
	// And SIGTERM ends the process.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for startExporter's cleanup
	case <-time.After(30 * time.Second):
		t.Fatalf("SIGTERM: still running after 30s\nlog:\n%s", logs.String())
	}
}

// reasonIs tells whether entry name's reason series is reason, at 1.
func reasonIs(metrics, name, reason string) bool {
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "provider_health_reason{") && strings.Contains(line, `name="`+name+`"`) &&
			strings.Contains(line, `reason="`+reason+`"`) {
			return strings.HasSuffix(strings.TrimSpace(line), " 1")
		}
	}
	return false
}

// residentBytes is the process's resident set size.
func residentBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// waitProcessGone waits until pid is gone or a zombie: the kill was sent,
// reaping an orphan is the system's.
func waitProcessGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		if f := strings.Fields(string(stat)); len(f) > 2 && f[2] == "Z" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("process %d still runs a minute after the check that started it", pid)
}

func writeExecutable(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
}

// serviceAccountJSON is a service-account credentials file whose tokens
// come from tokenURL, a loopback token endpoint.
func serviceAccountJSON(t *testing.T, tokenURL string) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "crawl-prod-123", "private_key_id": "0123456789abcdef",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "exporter@crawl-prod-123.iam.gserviceaccount.com", "token_uri": tokenURL,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(sa)
}

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// shadowFile is a file of /etc/shadow's shape: every line ends in ':', so
// YAML reads it as a mapping whose keys are its lines.
const shadowFile = "root:$6$saltsalt$Q8n1m3yRk2vZ9.hashhashhashhashhashhashhashhashhashhash/:19000:0:99999:7:::\n" +
	"daemon:*:19000:0:99999:7:::\n" +
	"proxyops:$6$pepper12$Zk2vZ9hashhashhashhashhashhashhashhashhashhashhash.:19001:0:99999:7:::\n"

// shadowLeaks are pieces of shadowFile no answer, log line or check output
// may repeat.
var shadowLeaks = []string{"$6$", "root:", "daemon", "19000", "hashhash", "pepper"}

// TestProviderTextAndWrongFilesAreNotEchoed runs the real binary with an
// entry whose API server refuses the dry run with ESC and NUL bytes in its
// message, then points its pod_template at a file of /etc/shadow's shape
// (a symlink, as a mistake would make it) and reloads: the debug probe's
// verdict line carries the bytes escaped, an unknown name= of 60 KB comes
// back as a short escaped prefix from /probe and /api/v1/status, and the
// refused reload's 500 answer, the log and --config.check name the line
// and never the file's contents. The process stays up and small, /metrics
// answers inside its scrape timeout and the other entry stays Ready.
func TestProviderTextAndWrongFilesAreNotEchoed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	denial, err := json.Marshal(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
		"message": "admission webhook \"deny.example.com\" denied the request: \x1b]0;owned\x07\x1b[2J\x00 cleared"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pods"):
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write(denial)
		case strings.HasSuffix(r.URL.Path, "/pods"):
			_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	kubeconfig := plainKubeconfig(t, dir, "k", srv.URL)
	pod := filepath.Join(dir, "proxy-pod.yaml")
	writeFile(t, pod, "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n    - name: proxy\n      image: registry.example/proxy:1\n")
	shadow := filepath.Join(dir, "shadow")
	writeFile(t, shadow, shadowFile)
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, "kubernetes:\n  - name: good\n    kubeconfig: "+kubeconfig+"\n"+
		"  - name: escapes\n    kubeconfig: "+kubeconfig+"\n    namespace: proxies\n    pod_template: "+pod+"\n")

	var logs syncBuffer
	cmd, exited, addr := startExporter(t, dir, &logs, "--config.file="+cfgPath)
	s := scraper{t: t, addr: addr, header: 30 * time.Second, logs: &logs}
	checkVerdicts := func() {
		t.Helper()
		code, metrics := s.get("/metrics")
		if code != http.StatusOK || !reasonIs(metrics, "good", "Ready") || !reasonIs(metrics, "escapes", "AdmissionDenied") {
			t.Errorf("/metrics: %d; want good Ready and escapes AdmissionDenied", code)
		}
	}
	checkVerdicts()

	code, debug := s.get("/probe?name=escapes&debug=true")
	if code != http.StatusOK || strings.ContainsAny(debug, "\x1b\x00\x07") {
		t.Errorf("debug probe: %d, raw control bytes in %q", code, debug)
	}
	if want := `denied the request: \x1b]0;owned\a\x1b[2J\x00 cleared`; !strings.Contains(debug, "Verdict for kubernetes/escapes/") || !strings.Contains(debug, want) {
		t.Errorf("debug probe lacks the escaped verdict %q:\n%s", want, debug)
	}
	long := "\x1b[2J" + strings.Repeat("n", 60_000)
	for _, path := range []string{"/probe?name=", "/api/v1/status?name=", "/?name="} {
		code, body := s.get(path + url.QueryEscape(long))
		if code != http.StatusBadRequest || len(body) > 300 || strings.Contains(body, "\x1b") || !strings.Contains(body, `"\x1b[2Jnnn`) {
			t.Errorf("%s<60 KB>: %d, %d bytes %.300q; want a 400 with a short escaped prefix", path, code, len(body), body)
		}
	}

	// The template becomes a symlink to a shadow-like file.
	if err := os.Remove(pod); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(shadow, pod); err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Post("http://"+addr+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), "line 1: unknown field at the top level: (a key of ") {
		t.Errorf("reload: %s %s, want 500 naming line 1", resp.Status, body)
	}
	var check bytes.Buffer
	cc := exec.Command(binary(t), "--config.check", "--config.file="+cfgPath)
	cc.Stdout, cc.Stderr = &check, &check
	if err := cc.Run(); exitCode(err) != 1 || !strings.Contains(check.String(), "line 3: unknown field") {
		t.Errorf("--config.check: %v, want exit 1 naming line 3:\n%s", err, check.String())
	}
	for what, text := range map[string]string{"the reload's answer": string(body), "the log": logs.String(), "--config.check": check.String()} {
		for _, leak := range shadowLeaks {
			if strings.Contains(text, leak) {
				t.Errorf("%s repeats the file (%q):\n%.2000s", what, leak, text)
			}
		}
	}
	checkVerdicts()
	assertAliveAndSmall(t, cmd, exited, &logs)
}

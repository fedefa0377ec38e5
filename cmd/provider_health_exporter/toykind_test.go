//go:build toykind

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/provider_health_exporter/internal/fakedns"
	"github.com/egress-proxies/provider_health_exporter/internal/testnet"
	"github.com/egress-proxies/provider_health_exporter/internal/toykind"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The binary these tests run has the toy kind (internal/kinds/toykind.go).
func init() { buildTags = "toykind" }

// toyEntry is one entry of the toy section and the verdict it must get.
type toyEntry struct {
	name, url, extra string
	reason           provider.Reason
	up               bool
}

func (e toyEntry) yaml() string {
	return fmt.Sprintf("  - name: %s\n    url: %s\n%s", e.name, e.url, e.extra)
}

// TestToyKindThroughTheBinary: a kind added by docs/development.md's
// recipe (internal/toykind) and one file in this package works through
// the real binary, started as main starts it: --config.check, /metrics
// with each outcome of the shared classifier under its own reason (never
// Unknown), collect[], /probe, /sd, /api/v1/status, /config and a reload.
func TestToyKindThroughTheBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/headers":
			// 1 MiB of headers, over provider.MaxHeaderBytes: the toy
			// kind's BoundedTransport refuses them, though the kind
			// never calls BoundHeaders.
			for i := range 128 {
				w.Header().Set(fmt.Sprintf("X-Padding-%d", i), strings.Repeat("h", 8<<10))
			}
		default:
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(backend.Close)
	host := strings.TrimPrefix(backend.URL, "http://")
	// A server that accepts and never answers: only the deadline ends
	// the check, however slow the machine.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	// Checks that answer get a minute: their verdict must not depend on
	// the machine's load.
	const long = "    timeout: 60s\n"
	entries := []toyEntry{
		{"ok", backend.URL + "/ok", long, provider.ReasonReady, true},
		{"down", backend.URL + "/down", long, toykind.ReasonHTTPError, true},
		{"refused", "http://" + testnet.RefusedAddr(t) + "/", long, provider.ReasonUnreachable, false},
		{"nxdomain", "http://toy.nxdomain.test:8080/", long + "    resolver: " + fakedns.Server(t) + "\n", provider.ReasonDNSFailed, false},
		{"plain", "https://" + host + "/ok", long, provider.ReasonTLSError, false},
		{"redirect", backend.URL + "/redirect", long, provider.ReasonBadResponse, true},
		{"headers", backend.URL + "/headers", long, provider.ReasonBadResponse, true},
		{"silent", "http://" + silent.Addr().String() + "/", "    timeout: 1s\n", provider.ReasonTimeout, false},
		// Userinfo and a query value that no page or label may show.
		{"secret", "http://toyuser:toypass@" + host + "/ok?token=toytoken", long, provider.ReasonReady, true},
	}
	// The set holds only reasons the kind can give: every one but
	// Unknown (what the engine says of a panic) is some entry's verdict
	// here, none brought in by a shared classifier the kind does not use.
	given := map[provider.Reason]bool{provider.ReasonUnknown: true}
	for _, e := range entries {
		given[e.reason] = true
	}
	for _, d := range toykind.Kind().Reasons() {
		if !given[d.Reason] {
			t.Errorf("the toy kind's set has %s, which no entry of this test gets: a reason the kind cannot give?", d.Reason)
		}
	}
	section := "toy:\n"
	for _, e := range entries {
		section += e.yaml()
	}
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, section)

	t.Run("config.check", func(t *testing.T) {
		stdout, stderr, code := runBinary(t, "--config.check", "--config.file="+cfgPath)
		if code != 0 || !strings.HasPrefix(stdout, "SUCCESS: "+cfgPath+": ") || !strings.HasSuffix(stdout, fmt.Sprintf(", %d toy: %d targets\n", len(entries), len(entries))) {
			t.Errorf("--config.check exited %d: %s%s", code, stdout, stderr)
		}
		// Strict decoding of the toy section beside a built-in one, each
		// error attributed to its own entry.
		bad := filepath.Join(dir, "bad.yml")
		writeFile(t, bad, "gcp:\n  - name: g\n    project: p\n    bogus1: x\ntoy:\n  - name: web\n    url: "+backend.URL+"/ok\n    bogus2: y\n")
		_, stderr, code = runBinary(t, "--config.check", "--config.file="+bad)
		want := `FAILED: config file ` + bad + `: line 4: gcp[0] "g": unknown field "bogus1"; line 8: toy[0] "web": unknown field "bogus2"` + "\n"
		if code != 1 || stderr != want {
			t.Errorf("--config.check of unknown keys exited %d:\n%s\nwant\n%s", code, stderr, want)
		}
		// The kind's own validation, with the entry named.
		writeFile(t, bad, "toy:\n  - name: web\n    url: ftp://x\n")
		_, stderr, code = runBinary(t, "--config.check", "--config.file="+bad)
		if code != 1 || !strings.Contains(stderr, `toy[0] "web": url: "ftp://x" is not an http(s) URL`) {
			t.Errorf("--config.check of a bad url exited %d: %s", code, stderr)
		}
	})

	var logs syncBuffer
	_, _, addr := startExporter(t, dir, &logs, "--config.file="+cfgPath)
	base := "http://" + addr
	client := &http.Client{Timeout: 2 * time.Minute}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp.StatusCode, string(b)
	}
	waitUntil(t, time.Minute, func() bool { code, _ := get("/-/healthy"); return code == http.StatusOK }, &logs)

	_, metrics := get("/metrics")
	setSize := len(toykind.Kind().Reasons())
	for _, e := range entries {
		labels := fmt.Sprintf(`name=%q,provider="toy"`, e.name)
		for _, want := range []string{
			fmt.Sprintf(`provider_health_reason{%s,reason=%q,target="url"} 1`, labels, e.reason),
			fmt.Sprintf(`provider_health_up{%s,target="url"} %d`, labels, boolInt(e.up)),
			fmt.Sprintf(`provider_health_ready{%s,target="url"} %d`, labels, boolInt(e.reason == provider.ReasonReady)),
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("%s: /metrics lacks %s", e.name, want)
			}
		}
		// Only the current reason is exported, always one of the set.
		if n := strings.Count(metrics, "provider_health_reason{"+labels+","); n != 1 || !toykind.Kind().Reasons().Contains(e.reason) {
			t.Errorf("%s has %d reason series (%s of a set of %d), want its current one only", e.name, n, e.reason, setSize)
		}
	}

	code, body := get("/metrics?collect[]=toy")
	if code != http.StatusOK || !strings.Contains(body, `provider_health_ready{name="ok",provider="toy",target="url"} 1`) {
		t.Errorf("collect[]=toy: %d\n%s", code, body)
	}
	if code, body = get("/metrics?collect[]=exporter"); code != http.StatusOK || strings.Contains(body, `provider="toy"`) {
		t.Errorf("collect[]=exporter: %d\n%s", code, body)
	}

	if _, body = get("/probe?name=plain&debug=true"); !strings.Contains(body, "Verdict for toy/plain/url: TLSError (up=false ready=false)") {
		t.Errorf("/probe?debug=true:\n%s", body)
	}
	if _, body = get("/probe?name=redirect"); !strings.Contains(body, `provider_health_reason{name="redirect",provider="toy",reason="BadResponse",target="url"} 1`) {
		t.Errorf("/probe:\n%s", body)
	}

	_, body = get("/api/v1/status")
	var doc struct{ Providers []statusProvider }
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("/api/v1/status: %v\n%s", err, body)
	}
	for _, e := range entries {
		status := doc.Providers
		i := slices.IndexFunc(status, func(p statusProvider) bool { return p.Provider == toykind.Name && p.Name == e.name })
		if i < 0 || len(status[i].Targets) != 1 {
			t.Errorf("/api/v1/status lacks toy %s:\n%s", e.name, body)
			continue
		}
		if st := status[i].Targets[0]; st.Reason != e.reason || st.Up != e.up || !st.Checked {
			t.Errorf("/api/v1/status of %s: reason %s up %v checked %v, want %s up %v", e.name, st.Reason, st.Up, st.Checked, e.reason, e.up)
		}
	}

	// /sd: one group per entry, selected by name= alone (one target each).
	_, body = get("/sd")
	var groups []sdGroup
	if err := json.Unmarshal([]byte(body), &groups); err != nil {
		t.Fatalf("/sd: %v\n%s", err, body)
	}
	var names []string
	for _, g := range groups {
		if g.Labels["provider"] != toykind.Name {
			continue
		}
		names = append(names, g.Labels["__param_name"])
		if _, ok := g.Labels["__param_target"]; ok {
			t.Errorf("/sd gives a one-target kind __param_target: %v", g.Labels)
		}
	}
	var want []string
	for _, e := range entries {
		want = append(want, e.name)
	}
	if slices.Sort(names); !slices.Equal(names, slices.Sorted(slices.Values(want))) {
		t.Errorf("/sd lists toy entries %v, want %v\n%s", names, want, body)
	}

	if _, body = get("/config"); !strings.Contains(body, "toy:\n    - name: ok\n") {
		t.Errorf("/config lacks the toy section:\n%s", body)
	}

	// The address of every entry goes through one redaction: target_info,
	// the status and /config show the secret entry's without userinfo or
	// query value.
	for _, path := range []string{"/metrics", "/api/v1/status", "/config", "/", "/probe?name=secret&debug=true"} {
		_, body := get(path)
		for _, secret := range []string{"toyuser", "toypass", "toytoken"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s shows %s:\n%s", path, secret, body)
			}
		}
	}
	if want := `address="http://` + host + `/ok?token=xxxxx",name="secret"`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks target_info{%s}", want)
	}

	// A reload adds an entry.
	writeFile(t, cfgPath, section+toyEntry{name: "added", url: backend.URL + "/ok", extra: long}.yaml())
	resp, err := client.Post(base+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /-/reload: %s\n%s", resp.Status, logs.String())
	}
	if code, body = get("/probe?name=added"); code != http.StatusOK || !strings.Contains(body, `provider_health_ready{name="added",provider="toy",target="url"} 1`) {
		t.Errorf("/probe of the entry the reload added: %d\n%s", code, body)
	}
}

// runBinary runs the binary to its end with args; code is its exit status.
func runBinary(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(binary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

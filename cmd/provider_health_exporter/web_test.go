package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// startBinary runs the real exporter with a kvm entry whose key does not
// parse (a verdict without any network traffic) and the given extra flags,
// and returns its address once it listens.
func startBinary(t *testing.T, flags ...string) (addr string, logs *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "key"), "not a key")
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, "kvm:\n  - name: lab\n    user: proxyops\n    private_key_file: key\n    insecure_ignore_host_key: true\n    hosts:\n      - address: 127.0.0.1:1\n        name: h\n")
	logs = &syncBuffer{}
	_, _, addr = startExporter(t, dir, logs, append([]string{"--config.file=" + cfgPath}, flags...)...)
	return addr, logs
}

// TestDeploymentProbesPassWithBasicAuth runs the probes of
// deploy/kubernetes/deployment.yaml the way the kubelet does against the real
// binary with basic auth on: a tcpSocket probe passes when the port accepts
// a connection, an httpGet probe when an unauthenticated GET answers 2xx or
// 3xx.
func TestDeploymentProbesPassWithBasicAuth(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Spec struct {
			Template struct {
				Spec corev1.PodSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &d); err != nil {
		t.Fatalf("deployment.yaml: %v", err)
	}

	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(dir, "web.yml")
	writeFile(t, webConfig, fmt.Sprintf("basic_auth_users:\n  prometheus: %s\n", hash))
	addr, logs := startBinary(t, "--web.config.file="+webConfig)
	host, _, _ := net.SplitHostPort(addr)

	// The server does ask for credentials: the probes must pass anyway.
	if resp, err := http.Get("http://" + addr + "/metrics"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without credentials: %d, want 401", resp.StatusCode)
	}

	probes := 0
	for _, c := range d.Spec.Template.Spec.Containers {
		// The pod's port numbers map to the one the test binary listens on.
		port := func(p intOrName) string {
			for _, cp := range c.Ports {
				if p.name == cp.Name || p.num == int(cp.ContainerPort) {
					_, ap, _ := net.SplitHostPort(addr)
					return ap
				}
			}
			t.Fatalf("container %s: probe port %v is not one of its ports", c.Name, p)
			return ""
		}
		for kind, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			if p == nil {
				if kind != "startup" {
					t.Errorf("container %s has no %s probe", c.Name, kind)
				}
				continue
			}
			probes++
			switch {
			case p.TCPSocket != nil:
				conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, port(toIntOrName(p.TCPSocket.Port.IntValue(), p.TCPSocket.Port.StrVal))), 10*time.Second)
				if err != nil {
					t.Errorf("%s tcpSocket probe fails: %v\n%s", kind, err, logs)
					continue
				}
				conn.Close()
			case p.HTTPGet != nil:
				u := fmt.Sprintf("%s://%s%s", strings.ToLower(string(p.HTTPGet.Scheme)), net.JoinHostPort(host, port(toIntOrName(p.HTTPGet.Port.IntValue(), p.HTTPGet.Port.StrVal))), p.HTTPGet.Path)
				if p.HTTPGet.Scheme == "" {
					u = "http" + u
				}
				resp, err := http.Get(u)
				if err != nil {
					t.Errorf("%s httpGet probe fails: %v", kind, err)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode < 200 || resp.StatusCode >= 400 {
					t.Errorf("%s httpGet probe %s answers %d with basic auth on: the kubelet would restart the pod", kind, u, resp.StatusCode)
				}
			default:
				t.Errorf("%s probe of container %s is neither tcpSocket nor httpGet; this test cannot run it", kind, c.Name)
			}
		}
	}
	if probes == 0 {
		t.Fatal("deployment.yaml has no probes")
	}
}

type intOrName struct {
	num  int
	name string
}

func toIntOrName(num int, name string) intOrName {
	if name != "" {
		return intOrName{name: name}
	}
	return intOrName{num: num}
}

// TestRoutePrefixBehindProxy puts the real binary behind a reverse proxy
// under /phe, once with the proxy passing the path through (the exporter
// serves under --web.route-prefix, taken from --web.external-url) and once
// with the proxy stripping it (--web.route-prefix=/). Every link of the
// landing page, the status debug links and the API paths work through the
// proxy.
func TestRoutePrefixBehindProxy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		strip bool
		flags []string
	}{
		{"passthrough", false, []string{"--web.external-url=http://proxy.invalid/phe/"}},
		{"stripping", true, []string{"--web.external-url=http://proxy.invalid/phe/", "--web.route-prefix=/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr, logs := startBinary(t, tc.flags...)
			backend := &url.URL{Scheme: "http", Host: addr}
			proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
				r.SetURL(backend)
				if tc.strip {
					r.Out.URL.Path = "/" + strings.TrimPrefix(strings.TrimPrefix(r.In.URL.Path, "/phe"), "/")
					r.Out.URL.RawPath = ""
				}
			}})
			t.Cleanup(proxy.Close)
			noRedirect := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			do := func(method, path string) (int, string, http.Header) {
				t.Helper()
				req, err := http.NewRequest(method, proxy.URL+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := noRedirect.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v\n%s", method, path, err, logs)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), resp.Header
			}

			code, landing, _ := do("GET", "/phe/")
			if code != http.StatusOK {
				t.Fatalf("GET /phe/: %d\n%s", code, landing)
			}
			hrefs := regexp.MustCompile(`<a href="([^"]*)"`).FindAllStringSubmatch(landing, -1)
			var debugLinks int
			for _, h := range hrefs {
				link := strings.ReplaceAll(h[1], "&amp;", "&")
				if !strings.HasPrefix(link, "/phe/") {
					t.Errorf("landing page link %q does not start with the external URL's path /phe/", link)
					continue
				}
				if strings.Contains(link, "debug=true") {
					debugLinks++
				}
				if code, body, _ := do("GET", link); code != http.StatusOK {
					t.Errorf("GET %s (landing page link): %d %s", link, code, body)
				}
			}
			if len(hrefs) < 4 || debugLinks == 0 {
				t.Errorf("landing page has %d links, %d debug links; want metrics, status, config and a debug link per target:\n%s", len(hrefs), debugLinks, landing)
			}
			for _, p := range []string{"/phe/metrics", "/phe/api/v1/status", "/phe/config", "/phe/-/healthy", "/phe/-/ready", "/phe/probe?name=lab&target=h"} {
				if code, body, _ := do("GET", p); code != http.StatusOK {
					t.Errorf("GET %s: %d %s", p, code, body)
				}
			}
			if code, body, _ := do("POST", "/phe/-/reload"); code != http.StatusOK {
				t.Errorf("POST /phe/-/reload: %d %s", code, body)
			}
			if !tc.strip {
				// Served under the prefix only; the root sends to it.
				if code, _, _ := do("GET", "/metrics"); code != http.StatusNotFound {
					t.Errorf("GET /metrics outside the route prefix: %d, want 404", code)
				}
				for _, p := range []string{"/", "/phe"} {
					code, _, h := do("GET", p)
					if code != http.StatusFound || h.Get("Location") != "/phe/" {
						t.Errorf("GET %s: %d Location %q, want 302 to /phe/", p, code, h.Get("Location"))
					}
				}
			}
		})
	}
}

func TestResolveWebPaths(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		external, prefix string
		want             webPaths
		err              string
	}{
		{"", "", webPaths{}, ""},
		{"", "/phe/", webPaths{routePrefix: "/phe"}, ""},
		{"https://example.com", "", webPaths{}, ""},
		{"https://example.com/a/b/", "", webPaths{routePrefix: "/a/b", linkPrefix: "/a/b"}, ""},
		{"https://example.com/a", "/", webPaths{linkPrefix: "/a"}, ""},
		{"https://example.com/a", "inner", webPaths{routePrefix: "/inner", linkPrefix: "/a"}, ""},
		{"example.com/a", "", webPaths{}, "want an absolute http or https URL"},
		{"https://example.com/a?x=1", "", webPaths{}, "a query or fragment"},
		{"http://[::1", "", webPaths{}, "missing ']'"},
	} {
		got, err := resolveWebPaths(tc.external, tc.prefix)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("resolveWebPaths(%q, %q) error %v, want one containing %q", tc.external, tc.prefix, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("resolveWebPaths(%q, %q) = %+v, %v; want %+v", tc.external, tc.prefix, got, err, tc.want)
		}
	}
}

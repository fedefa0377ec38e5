package validate

// The chart's secured scraping against the real exporter: the exporter
// binary runs under --web.config.file with TLS and basic auth, and
// Prometheus's own code makes the requests the Prometheus Operator would
// configure from the rendered ServiceMonitor and ScrapeConfig: the /sd
// request of the ScrapeConfig through Prometheus's http_sd discovery
// (github.com/prometheus/prometheus/discovery/http), its relabelings
// through Prometheus's relabel package, and each scrape through the HTTP
// client Prometheus builds from a scrape config (prometheus/common/config).

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/discovery"
	httpsd "github.com/prometheus/prometheus/discovery/http"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
)

// secrets stands in for the Secrets the Prometheus Operator reads for a
// ServiceMonitor or ScrapeConfig: name -> key -> value.
type secrets map[string]map[string]string

func (s secrets) get(t *testing.T, sel corev1.SecretKeySelector) string {
	t.Helper()
	v, ok := s[sel.Name][sel.Key]
	if !ok {
		t.Fatalf("the rendering refers to Secret %s key %s, which the test does not have", sel.Name, sel.Key)
	}
	return v
}

// operatorHTTPConfig is the HTTP client configuration the Prometheus
// Operator writes into Prometheus's configuration for these settings, with
// the Secrets' contents inlined. A setting it does not translate fails the
// test: nothing rendered is silently left out.
func operatorHTTPConfig(t *testing.T, store secrets, tls *monitoringv1.SafeTLSConfig, basic *monitoringv1.BasicAuth, authz *monitoringv1.SafeAuthorization) promconfig.HTTPClientConfig {
	t.Helper()
	hc := promconfig.DefaultHTTPClientConfig
	if tls != nil {
		if tls.CA.Secret == nil || tls.CA.ConfigMap != nil || tls.Cert.Secret != nil || tls.Cert.ConfigMap != nil || tls.KeySecret != nil ||
			tls.InsecureSkipVerify != nil || tls.MinVersion != nil || tls.MaxVersion != nil {
			t.Fatalf("tlsConfig %s: the test translates ca.secret and serverName only", dump(tls))
		}
		hc.TLSConfig.CA = store.get(t, *tls.CA.Secret)
		if tls.ServerName != nil {
			hc.TLSConfig.ServerName = *tls.ServerName
		}
	}
	if basic != nil {
		hc.BasicAuth = &promconfig.BasicAuth{
			Username: store.get(t, basic.Username),
			Password: promconfig.Secret(store.get(t, basic.Password)),
		}
	}
	if authz != nil {
		t.Fatalf("authorization %s: exporter-toolkit checks basic auth only", dump(authz))
	}
	if err := hc.Validate(); err != nil {
		t.Fatalf("HTTP client config: %v", err)
	}
	return hc
}

// promRelabel converts the operator's relabelings to Prometheus's, with
// Prometheus's defaults for what is left out.
func promRelabel(t *testing.T, rcs []monitoringv1.RelabelConfig) []*relabel.Config {
	t.Helper()
	var out []*relabel.Config
	for _, rc := range rcs {
		c := relabel.DefaultRelabelConfig
		c.NameValidationScheme = model.UTF8Validation
		for _, l := range rc.SourceLabels {
			c.SourceLabels = append(c.SourceLabels, model.LabelName(l))
		}
		if rc.Separator != nil {
			c.Separator = *rc.Separator
		}
		if rc.Regex != "" {
			c.Regex = relabel.MustNewRegexp(rc.Regex)
		}
		c.TargetLabel = rc.TargetLabel
		if rc.Replacement != nil {
			c.Replacement = *rc.Replacement
		}
		if rc.Action != "" {
			c.Action = relabel.Action(strings.ToLower(rc.Action))
		}
		if err := c.Validate(model.UTF8Validation); err != nil {
			t.Fatalf("relabeling %s: %v", dump(rc), err)
		}
		out = append(out, &c)
	}
	return out
}

// TestSecuredScrapeAgainstTheExporter: the exporter serves TLS (a
// certificate for the Service's name only, signed by a CA of the test) and
// basic auth. From the chart rendered with serviceMonitor's https,
// tlsConfig.ca and basicAuth:
//   - the ScrapeConfig's /sd request, made by Prometheus's http_sd
//     discovery to the Service's name, lists every entry and KVM host;
//   - its relabelings give each target the instance NAME/HOST, the
//     exporter label and job provider-health;
//   - each discovered target, scraped over https with the ScrapeConfig's
//     credentials at the address /sd gave, answers with its provider's
//     metrics;
//   - the ServiceMonitor's scrape of the Pod's address (here 127.0.0.1,
//     which the certificate does not name) works through the serverName
//     the chart sets, and gets the exporter's own metrics;
//   - without the credentials, or without the serverName, each fails: the
//     settings are what makes them work.
func TestSecuredScrapeAgainstTheExporter(t *testing.T) {
	c := renderChart(t, securedValues())
	serverName := c.service.Name + "." + c.service.Namespace + ".svc"
	serviceAddr := net.JoinHostPort(serverName, fmt.Sprint(c.service.Spec.Ports[0].Port))

	dir := t.TempDir()
	caPEM, certFile, keyFile := testPKI(t, dir, serverName)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := writeTestFile(t, dir, "web-config.yml", fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prometheus: %s\n", certFile, keyFile, hash))
	// A key that does not parse: each KVM check fails at its first stage,
	// without any network traffic; the scrapes are what this test is about.
	writeTestFile(t, dir, "key", "not a key\n")
	cfg := writeTestFile(t, dir, "provider_health.yml", "kvm:\n  - name: lab\n    user: proxyops\n    private_key_file: key\n    insecure_ignore_host_key: true\n    hosts:\n      - address: 127.0.0.1:1\n        name: h1\n      - address: 127.0.0.1:2\n        name: h2\n")
	addr := startTestExporter(t, dir, "--config.file="+cfg, "--web.config.file="+webConfig)

	store := secrets{"phe-scrape": {"ca.crt": caPEM, "username": "prometheus", "password": "s3cret"}}
	// The cluster's DNS and Service: the Service's name reaches the
	// exporter; the Pod's address is the exporter's own.
	var dialed []string
	var mu sync.Mutex
	dial := promconfig.WithDialContextFunc(func(ctx context.Context, network, a string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, a)
		mu.Unlock()
		if a == serviceAddr {
			a = addr
		}
		var d net.Dialer
		return d.DialContext(ctx, network, a)
	})

	sc := c.scrapeConfig.Spec
	if len(sc.HTTPSDConfigs) != 1 {
		t.Fatalf("httpSDConfigs %s, want one", dump(sc.HTTPSDConfigs))
	}
	sd := sc.HTTPSDConfigs[0]
	sdHTTP := operatorHTTPConfig(t, store, sd.TLSConfig, sd.BasicAuth, sd.Authorization)
	groups, err := discover(t, string(sd.URL), sdHTTP, dial)
	if err != nil {
		t.Fatalf("http_sd of %s with the rendered settings: %v", sd.URL, err)
	}

	rcs := promRelabel(t, sc.RelabelConfigs)
	scrapeHTTP := operatorHTTPConfig(t, store, sc.TLSConfig, sc.BasicAuth, sc.Authorization)
	scrapeClient, err := promconfig.NewClientFromConfig(scrapeHTTP, "scrape", dial)
	if err != nil {
		t.Fatal(err)
	}
	var instances []string
	for _, g := range groups {
		for _, tgt := range g.Targets {
			lb := labels.NewBuilder(labels.EmptyLabels())
			for k, v := range g.Labels {
				lb.Set(string(k), string(v))
			}
			for k, v := range tgt {
				lb.Set(string(k), string(v))
			}
			lb.Set(model.SchemeLabel, sc.Scheme.String())
			lb.Set(model.JobLabel, "scrapeConfig/"+c.scrapeConfig.Namespace+"/"+c.scrapeConfig.Name)
			pre := lb.Labels()
			pb := labels.NewBuilder(pre)
			keep := relabel.ProcessBuilder(pb, rcs...)
			post := pb.Labels()
			if !keep {
				t.Errorf("the relabelings drop %s", pre)
				continue
			}
			instances = append(instances, post.Get("instance"))
			if post.Get("job") != "provider-health" || post.Get("exporter") != serviceAddr || post.Has("provider") || post.Has("name") || post.Has("target") {
				t.Errorf("target %s relabels to %s: want job provider-health, exporter %s, no provider, name or target", pre, post, serviceAddr)
			}
			u := targetURL(pre)
			body, code := get(t, scrapeClient, u, sc.ScrapeTimeout)
			host := pre.Get("__param_target")
			if code != http.StatusOK || !strings.Contains(body, `provider_health_up{name="lab",provider="kvm",target="`+host+`"}`) {
				t.Errorf("scrape of %s with the rendered settings: %d, want 200 and host %s's metrics:\n%.500s", u, code, host, body)
			}
		}
	}
	slices.Sort(instances)
	if want := []string{"lab/h1", "lab/h2"}; !slices.Equal(instances, want) {
		t.Errorf("discovered instances %v, want %v", instances, want)
	}

	ep := c.serviceMonitor.Spec.Endpoints[0]
	smHTTP := operatorHTTPConfig(t, store, &ep.TLSConfig.SafeTLSConfig, ep.BasicAuth, ep.Authorization)
	smClient, err := promconfig.NewClientFromConfig(smHTTP, "scrape", dial)
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values(ep.Params)
	own := &url.URL{Scheme: ep.Scheme.String(), Host: addr, Path: ep.Path, RawQuery: q.Encode()}
	if body, code := get(t, smClient, own.String(), &ep.ScrapeTimeout); code != http.StatusOK || !strings.Contains(body, "provider_health_exporter_build_info{") || strings.Contains(body, "provider_health_up{") {
		t.Errorf("the ServiceMonitor's scrape of %s: %d, want 200 and the exporter's own metrics only:\n%.500s", own, code, body)
	}

	// The same requests less what the chart rendered must fail.
	noAuth := sdHTTP
	noAuth.BasicAuth = nil
	if _, err := discover(t, string(sd.URL), noAuth, dial); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("http_sd without basicAuth: %v, want 401", err)
	}
	noName := smHTTP
	noName.TLSConfig.ServerName = ""
	if cl, err := promconfig.NewClientFromConfig(noName, "scrape", dial); err != nil {
		t.Fatal(err)
	} else if _, err := cl.Get(own.String()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("the ServiceMonitor's scrape without serverName: %v, want a certificate error", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(dialed, serviceAddr) || !slices.Contains(dialed, addr) {
		t.Errorf("dialed %v: want both the Service's name (the ScrapeConfig) and the Pod's address (the ServiceMonitor)", dialed)
	}
}

// discover runs one refresh of Prometheus's http_sd discovery of u.
func discover(t *testing.T, u string, hc promconfig.HTTPClientConfig, opts ...promconfig.HTTPClientOption) ([]*targetgroup.Group, error) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := &httpsd.SDConfig{HTTPClientConfig: hc, URL: u, RefreshInterval: model.Duration(time.Minute)}
	metrics := cfg.NewDiscovererMetrics(reg, discovery.NewRefreshMetrics(reg))
	d, err := httpsd.NewDiscovery(cfg, discovery.DiscovererOptions{Metrics: metrics, HTTPClientOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	return d.Refresh(t.Context())
}

// targetURL is the URL Prometheus scrapes for a target's labels before
// relabeling: __scheme__, __address__, __metrics_path__ and the
// __param_* parameters.
func targetURL(l labels.Labels) string {
	q := url.Values{}
	l.Range(func(lb labels.Label) {
		if p, ok := strings.CutPrefix(lb.Name, model.ParamLabelPrefix); ok {
			q.Set(p, lb.Value)
		}
	})
	return (&url.URL{Scheme: l.Get(model.SchemeLabel), Host: l.Get(model.AddressLabel), Path: l.Get(model.MetricsPathLabel), RawQuery: q.Encode()}).String()
}

// get scrapes u as Prometheus does: with the scrape timeout header.
func get(t *testing.T, cl *http.Client, u string, timeout *monitoringv1.Duration) (string, int) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if timeout != nil {
		d, err := time.ParseDuration(string(*timeout))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", fmt.Sprint(d.Seconds()))
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err.Error(), 0
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), resp.StatusCode
}

// testPKI writes a CA and a server certificate for dnsName only (no IP
// address) signed by it; it returns the CA's PEM and the files of the
// server's certificate and key.
func testPKI(t *testing.T, dir, dnsName string) (caPEM, certFile, keyFile string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, srvKey := newKey(), newKey()
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "phe test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	certFile = writeTestFile(t, dir, "tls.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})))
	keyFile = writeTestFile(t, dir, "tls.key", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return caPEM, certFile, keyFile
}

func writeTestFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// exporterBinary builds the exporter from the repository into a directory
// of the test.
func exporterBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "provider_health_exporter")
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/provider_health_exporter")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var listeningRE = regexp.MustCompile(`msg="?Listening on"? address=([^\s]+)`)

// startTestExporter runs the exporter on a free loopback port until the
// test ends and returns its address, once it listens.
func startTestExporter(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(exporterBinary(t), append(args, "--web.listen-address=127.0.0.1:0")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "GCE_METADATA_HOST=127.0.0.1:1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan string, 1)
	var logs strings.Builder
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		close(found)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	a, ok := <-found
	if !ok {
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("the exporter exited before it listened; log:\n%s", logs.String())
	}
	return a
}

package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/testcert"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

var (
	// buildTags are the tags the binary is built with: those of this
	// test (internal/kinds/toykind.go's toykind adds the toy kind).
	buildTags string
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds the exporter once per test run: these tests exercise what
// only the real process has (flags, signals, the exporter-toolkit server).
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "phe-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, program)
		out, err := exec.Command("go", "build", "-tags", buildTags, "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func TestConfigCheckEveryInvalidFile(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "invalid-*.yml"))
	if err != nil || len(files) < 15 {
		t.Fatalf("invalid files: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			_, loadErr := config.Load(f, provider.Sections(builtinKinds()))
			if loadErr == nil {
				t.Fatal("config.Load accepts it")
			}
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, "--config.check", "--config.file="+f)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1", err)
			}
			if want := "FAILED: " + loadErr.Error() + "\n"; stderr.String() != want {
				t.Errorf("stderr %q, want %q", stderr.String(), want)
			}
		})
	}
}

func TestConfigCheckValidFileWarnsAboutContents(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	f := filepath.Join("..", "..", "testdata", "valid-full.yml")
	cmd := exec.Command(binary(t), "--config.check", "--config.file="+f)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("exit %v: %s", err, stderr.String())
	}
	// Each section's count, whatever other kinds the binary has.
	out := stdout.String()
	if !strings.HasPrefix(out, "SUCCESS: "+f+": 1 kubernetes, 1 gcp, 1 kvm (3 hosts)") || !strings.HasSuffix(out, ": 5 targets\n") {
		t.Errorf("stdout %q, want the counts of valid-full.yml", out)
	}
	for _, want := range []string{
		`WARNING: kvm "lab": private_key_file`, "ssh: no key found",
		`WARNING: gcp "crawl-prod": credentials_file`, "not a JSON credentials file",
		`WARNING: kubernetes "prod-cluster": kubeconfig`,
		`WARNING: kvm "lab": known_hosts_file`,
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestWebConfigCoversEveryPathAndSIGHUPReloads runs the real binary with
// TLS and basic auth from --web.config.file.
func TestWebConfigCoversEveryPathAndSIGHUPReloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, pool := selfSignedCert(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(dir, "web.yml")
	writeFile(t, webConfig, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prometheus: %s\n", certFile, keyFile, hash))
	// A key that does not parse: the kvm check fails at its first stage
	// without any network traffic, which is all this test needs.
	writeFile(t, filepath.Join(dir, "key"), "not a key")
	cfgPath := filepath.Join(dir, "provider_health.yml")
	kvmEntry := func(name string) string {
		return fmt.Sprintf("  - name: %s\n    user: proxyops\n    private_key_file: key\n    insecure_ignore_host_key: true\n    hosts:\n      - address: 127.0.0.1:1\n        name: h\n", name)
	}
	writeFile(t, cfgPath, "kvm:\n"+kvmEntry("lab"))

	var logs syncBuffer
	cmd, exited, addr := startExporter(t, dir, &logs, "--config.file="+cfgPath, "--web.config.file="+webConfig, "--web.enable-pprof")

	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + addr
	do := func(method, path string, auth bool) (int, string) {
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth {
			req.SetBasicAuth("prometheus", "s3cret")
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitUntil(t, 30*time.Second, func() bool { code, _ := do("GET", "/-/healthy", true); return code == 200 }, &logs)

	for _, p := range []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/metrics"}, {"GET", "/probe?name=lab"}, {"GET", "/api/v1/status"},
		{"GET", "/config"}, {"GET", "/-/healthy"}, {"GET", "/-/ready"}, {"POST", "/-/reload"},
		{"GET", "/sd"}, {"GET", "/debug/pprof/"}, {"GET", "/debug/pprof/cmdline"},
	} {
		if code, _ := do(p.method, p.path, false); code != http.StatusUnauthorized {
			t.Errorf("%s %s without credentials: %d, want 401", p.method, p.path, code)
		}
		if code, body := do(p.method, p.path, true); code != http.StatusOK {
			t.Errorf("%s %s with credentials: %d %s", p.method, p.path, code, body)
		}
	}
	plain, err := http.Get("http://" + addr + "/metrics")
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Error("plain HTTP served metrics although TLS is configured")
		}
	}
	if _, body := do("GET", "/metrics", true); !strings.Contains(body, `provider_health_reason{name="lab",provider="kvm",reason="SSHMaterialInvalid",target="h"} 1`) {
		t.Errorf("metrics lack the kvm verdict:\n%s", body)
	}

	writeFile(t, cfgPath, "kvm:\n"+kvmEntry("lab")+kvmEntry("lab2"))
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, func() bool { code, _ := do("GET", "/probe?name=lab2", true); return code == 200 }, &logs)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("no exit within 30s of SIGTERM")
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Error("the password appears in the log")
	}
}

func TestStartFailsOnBadConfig(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	cmd := exec.Command(binary(t), "--config.file="+filepath.Join("..", "..", "testdata", "invalid-missing-project.yml"), "--web.listen-address=127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit %v, want 1", err)
	}
	if !strings.Contains(out.String(), `project: missing (required)`) {
		t.Errorf("log lacks the reason:\n%s", out.String())
	}
}

// startExporter starts the binary with args, HOME in dir and Google's
// metadata server on loopback, its output in out; it is killed at the end of
// the test. It listens on 127.0.0.1:0, a port the kernel picks when it
// binds, and addr is read back from its log: a port found free by the test
// and handed over could be taken by anyone in between. exited receives
// Wait's result once.
func startExporter(t *testing.T, dir string, out io.Writer, args ...string) (cmd *exec.Cmd, exited chan error, addr string) {
	t.Helper()
	return startExporterEnv(t, dir, out, nil, args...)
}

// startExporterEnv is startExporter with env added to the process's
// environment.
func startExporterEnv(t *testing.T, dir string, out io.Writer, env []string, args ...string) (cmd *exec.Cmd, exited chan error, addr string) {
	t.Helper()
	w := &listenWatcher{out: out, found: make(chan string, 1)}
	cmd = exec.Command(binary(t), append(args, "--web.listen-address=127.0.0.1:0")...)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Env = append(append(os.Environ(), "HOME="+dir, "GCE_METADATA_HOST=127.0.0.1:1"), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	select {
	case addr = <-w.found:
	case err := <-exited:
		exited <- err
		t.Fatalf("the exporter exited before it listened: %v; log:\n%s", err, w.String())
	case <-time.After(2 * time.Minute):
		// A guard against a hang, not a measure of speed.
		t.Fatalf("the exporter did not log its listening address; log:\n%s", w.String())
	}
	return cmd, exited, addr
}

// listeningRE finds the address in the "Listening on" record the
// exporter-toolkit logs once its listener is bound (logfmt or JSON).
var listeningRE = regexp.MustCompile(`"?msg"?[=:]"Listening on",? ?"?address"?[=:]"?([^"\s]+)`)

// listenWatcher passes the process's output on to out and hands the
// address of the first "Listening on" record to found.
type listenWatcher struct {
	out   io.Writer
	found chan string

	mu   sync.Mutex
	line []byte // the unfinished line; nil once the address is found
	done bool
	all  bytes.Buffer
}

func (w *listenWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.all.Write(p)
	if !w.done {
		w.line = append(w.line, p...)
		for i := bytes.IndexByte(w.line, '\n'); i >= 0 && !w.done; i = bytes.IndexByte(w.line, '\n') {
			if m := listeningRE.FindSubmatch(w.line[:i]); m != nil {
				w.found <- string(m[1])
				w.done, w.line = true, nil
				break
			}
			w.line = w.line[i+1:]
		}
	}
	w.mu.Unlock()
	return w.out.Write(p)
}

// String is everything the process wrote, for a failure's message.
func (w *listenWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

func writeFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func waitUntil(t *testing.T, limit time.Duration, cond func() bool, logs fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v; exporter log:\n%s", limit, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func selfSignedCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	c := testcert.New(t, "provider_health_exporter test")
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeFile(t, certFile, string(c.CertPEM))
	writeFile(t, keyFile, string(c.KeyPEM))
	return certFile, keyFile, c.Pool
}

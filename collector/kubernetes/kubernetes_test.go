package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/egress-proxies/provider_health_exporter/internal/fakedns"
	"github.com/egress-proxies/provider_health_exporter/internal/testcert"

	"github.com/egress-proxies/provider_health_exporter/internal/testnet"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestMain fails the package when a check leaves a connection (and its
// goroutines) behind: no socket may outlive its scrape.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog's flush daemon is started by the klog package itself.
		goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

const (
	testToken    = "s3cr3t-test-token"
	testSelector = DefaultLabelSelector
)

// apiServer is an httptest API server. It records what it was asked and
// answers with the handler of the case.
type apiServer struct {
	*httptest.Server
	hits atomic.Int32

	mu   sync.Mutex
	last *http.Request
}

func newAPIServer(t testing.TB, tlsOn bool, h http.HandlerFunc) *apiServer {
	t.Helper()
	s := &apiServer{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		s.last = r.Clone(context.Background())
		s.mu.Unlock()
		h(w, r)
	})
	s.Server = httptest.NewUnstartedServer(handler)
	// Handshake failures are what some cases are about; keep them out of
	// the test output.
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	if tlsOn {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func (s *apiServer) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

func (s *apiServer) lastRequest() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// writeStatus answers like the API server does: a metav1.Status body with
// the status code.
func writeStatus(w http.ResponseWriter, se *apierrors.StatusError, header map[string]string) {
	st := se.ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	body, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	for k, v := range header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(int(st.Code))
	_, _ = w.Write(body)
}

func writePodList(w http.ResponseWriter, pods ...corev1.Pod) {
	list := corev1.PodList{
		TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: "4242"},
		Items:    pods,
	}
	if len(pods) > 0 {
		list.Continue = "next-page-token"
	}
	body, _ := json.Marshal(list)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// kubeconfig writes a kubeconfig for server into a temporary directory and
// returns its path. mutate adjusts it before it is written.
func kubeconfig(t testing.TB, server string, caPEM []byte, mutate func(*clientcmdapi.Config)) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	kc.AuthInfos["exporter"] = &clientcmdapi.AuthInfo{Token: testToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "exporter"}
	kc.CurrentContext = "test"
	if mutate != nil {
		mutate(kc)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func newTestChecker(t *testing.T, path string, opts ...provider.Option) *Checker {
	t.Helper()
	c, err := New(&Entry{Name: "test", Kubeconfig: path, LabelSelector: testSelector}, slog.New(slog.DiscardHandler), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func check(c *Checker) provider.Verdict {
	return c.Check(context.Background(), slog.New(slog.DiscardHandler), TargetName)
}

func managedPod() corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "proxy-0", Namespace: "egress",
			Labels: map[string]string{"app.kubernetes.io/managed-by": "egress-proxies-operator"},
		},
	}
}

var podsResource = schema.GroupResource{Resource: "pods"}

// TestAPIAnswers covers every answer the API server can give. Each case
// must be decided by exactly one request: client-go's retries on 429 and
// 5xx with Retry-After, and on EOF for GETs, must not happen.
func TestAPIAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    provider.Reason
	}{
		{"no pods", func(w http.ResponseWriter, _ *http.Request) { writePodList(w) }, provider.ReasonReady},
		{"a managed pod", func(w http.ResponseWriter, _ *http.Request) { writePodList(w, managedPod()) }, provider.ReasonReady},
		{"401", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, apierrors.NewUnauthorized("Unauthorized"), nil)
		}, provider.ReasonUnauthorized},
		{"403 RBAC", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, apierrors.NewForbidden(podsResource, "", errors.New(`User "system:serviceaccount:provider-health:provider-health-exporter" cannot list resource "pods" in API group "" at the cluster scope`)), nil)
		}, provider.ReasonForbidden},
		{"404", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, ""), nil)
		}, provider.ReasonNotFound},
		{"404 without a Status body", func(w http.ResponseWriter, _ *http.Request) {
			http.NotFound(w, nil)
		}, provider.ReasonNotFound},
		{"400 bad selector", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, apierrors.NewBadRequest(`unable to parse requirement: values[0][app.kubernetes.io/managed-by]: Invalid value: "!!": a valid label must be an empty string or consist of alphanumeric characters`), nil)
		}, provider.ReasonInvalidRequest},
		{"429 with Retry-After", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, apierrors.NewTooManyRequests("too many requests, please try again later", 1), map[string]string{"Retry-After": "1"})
		}, provider.ReasonRateLimited},
		{"503 with Retry-After", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, apierrors.NewServiceUnavailable("the server is shutting down"), map[string]string{"Retry-After": "1"})
		}, provider.ReasonServerError},
		{"500 plain text", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		}, provider.ReasonServerError},
		{"502 html from a proxy", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html><body>Bad Gateway</body></html>")
		}, provider.ReasonServerError},
		{"409 is not in the contract", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, apierrors.NewConflict(podsResource, "", errors.New("conflict")), nil)
		}, provider.ReasonUnknown},
		{"200 html", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html><body>Welcome</body></html>")
		}, provider.ReasonBadResponse},
		{"200 truncated json", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","items":[`)
		}, provider.ReasonBadResponse},
		{"200 some other kind", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"x"}}`)
		}, provider.ReasonBadResponse},
		{"connection dropped mid-body", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "4096")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"kind":"PodList",`)
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}, provider.ReasonBadResponse},
		{"connection closed before an answer", func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}, provider.ReasonUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newAPIServer(t, true, tc.handler)
			c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), nil))
			v := check(c)
			if v.Reason != tc.want {
				t.Errorf("reason = %s (%s), want %s", v.Reason, v.Message, tc.want)
			}
			if n := srv.hits.Load(); n != 1 {
				t.Errorf("API server got %d requests, want exactly 1", n)
			}
			if strings.Contains(v.Message, testToken) {
				t.Errorf("message leaks the token: %s", v.Message)
			}
		})
	}
}

// TestRequestShape pins the one request a check makes: the verb and scope
// the operator needs, the selector, a page of one, our credentials.
func TestRequestShape(t *testing.T) {
	t.Parallel()
	srv := newAPIServer(t, true, func(w http.ResponseWriter, _ *http.Request) { writePodList(w) })
	c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), nil))
	if v := check(c); v.Reason != provider.ReasonReady || v.Capacity.Known {
		t.Fatalf("reason = %s (%s), capacity %s; want Ready without a capacity (no capacity key)", v.Reason, v.Message, v.Capacity)
	}
	r := srv.lastRequest()
	if r.Method != http.MethodGet || r.URL.Path != "/api/v1/pods" {
		t.Errorf("request = %s %s, want GET /api/v1/pods", r.Method, r.URL.Path)
	}
	q := r.URL.Query()
	if got := q.Get("labelSelector"); got != testSelector {
		t.Errorf("labelSelector = %q, want %q", got, testSelector)
	}
	if got := q.Get("limit"); got != "1" {
		t.Errorf("limit = %q, want 1", got)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+testToken {
		t.Errorf("Authorization = %q, want the kubeconfig's bearer token", got)
	}
	if got := r.Header.Get("User-Agent"); got != userAgent {
		t.Errorf("User-Agent = %q, want %q", got, userAgent)
	}
	want := []provider.Target{{Name: TargetName, Address: srv.URL}}
	if got := c.Targets(); len(got) != 1 || got[0] != want[0] {
		t.Errorf("Targets() = %v, want %v", got, want)
	}
}

// TestRetryTrapIsReal shows that the client-go in use does retry a 429 with
// Retry-After when left alone, so TestAPIAnswers' request count has teeth.
func TestRetryTrapIsReal(t *testing.T) {
	t.Parallel()
	srv := newAPIServer(t, true, func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, apierrors.NewTooManyRequests("slow down", 1), map[string]string{"Retry-After": "1"})
	})
	c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), nil))
	cl, err := c.current(context.Background(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.http.CloseIdleConnections()
	err = cl.rest.Get().Resource("pods").MaxRetries(1).Do(context.Background()).Error()
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("err = %v, want 429", err)
	}
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("with MaxRetries(1) the API server got %d requests; expected client-go to retry once", n)
	}
}

// TestNoClientSideThrottling: the limiter client-go would put in front of
// every request (5 QPS, burst 10 by default) never makes a check wait.
func TestNoClientSideThrottling(t *testing.T) {
	t.Parallel()
	srv := newAPIServer(t, true, func(w http.ResponseWriter, _ *http.Request) { writePodList(w) })
	c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), nil))
	cl, err := c.current(context.Background(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rl := cl.rest.GetRateLimiter()
	for i := range 1000 {
		if !rl.TryAccept() {
			t.Fatalf("request %d would have been throttled", i+1)
		}
	}
}

func TestTLSErrors(t *testing.T) {
	t.Parallel()
	otherCA := selfSignedPEM(t)
	for _, tc := range []struct {
		name   string
		https  bool
		ca     func(*apiServer) []byte
		mutate func(*clientcmdapi.Config)
	}{
		{"unknown CA", true, func(*apiServer) []byte { return otherCA }, nil},
		{"hostname mismatch", true, (*apiServer).caPEM, func(kc *clientcmdapi.Config) {
			kc.Clusters["test"].TLSServerName = "apiserver.example.net"
		}},
		{"HTTP answer to HTTPS", false, func(*apiServer) []byte { return nil }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newAPIServer(t, tc.https, func(w http.ResponseWriter, _ *http.Request) { writePodList(w) })
			server := strings.Replace(srv.URL, "http://", "https://", 1)
			c := newTestChecker(t, kubeconfig(t, server, tc.ca(srv), tc.mutate))
			if v := check(c); v.Reason != provider.ReasonTLSError {
				t.Errorf("reason = %s (%s), want TLSError", v.Reason, v.Message)
			}
		})
	}
}

// selfSignedPEM is a CA certificate that signed nothing the servers use.
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	return testcert.New(t, "some other CA").CertPEM
}

// silentListener accepts connections and never says anything.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

func TestTransportFailures(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		c := newTestChecker(t, kubeconfig(t, "https://"+testnet.RefusedAddr(t), selfSignedPEM(t), nil))
		if v := check(c); v.Reason != provider.ReasonUnreachable {
			t.Errorf("reason = %s (%s), want Unreachable", v.Reason, v.Message)
		}
	})
	t.Run("deadline during the TLS handshake", func(t *testing.T) {
		t.Parallel()
		c := newTestChecker(t, kubeconfig(t, "https://"+silentListener(t), selfSignedPEM(t), nil))
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if v := c.Check(ctx, slog.New(slog.DiscardHandler), TargetName); v.Reason != provider.ReasonTimeout {
			t.Errorf("reason = %s (%s), want Timeout", v.Reason, v.Message)
		}
	})
	t.Run("name does not resolve", func(t *testing.T) {
		t.Parallel()
		c := newTestChecker(t, kubeconfig(t, "https://apiserver.invalid:6443", selfSignedPEM(t), nil), provider.WithDialer(fakedns.Dialer(t)))
		if v := check(c); v.Reason != provider.ReasonDNSFailed {
			t.Errorf("reason = %s (%s), want DNSFailed", v.Reason, v.Message)
		}
	})
}

// TestHandshakeTimeoutIsTimeout feeds classify the real error net/http
// returns when a TLS handshake times out: it is not a context error, and
// client-go's transport has a 10s handshake timeout that can fire before a
// longer check budget ends.
func TestHandshakeTimeoutIsTimeout(t *testing.T) {
	t.Parallel()
	tr := &http.Transport{TLSHandshakeTimeout: 50 * time.Millisecond}
	defer tr.CloseIdleConnections()
	_, err := (&http.Client{Transport: tr}).Get("https://" + silentListener(t) + "/api/v1/pods")
	if err == nil {
		t.Fatal("expected a handshake timeout")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v is a context error; the case under test is the one that is not", err)
	}
	sent := &trace{}
	sent.sent.Store(true)
	if r := classify(context.Background(), err, sent); r != provider.ReasonTimeout {
		t.Errorf("classify(%v) = %s, want Timeout", err, r)
	}
}

func TestCredentialsUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(*clientcmdapi.Config)
	}{
		{"exec plugin fails", func(kc *clientcmdapi.Config) {
			kc.AuthInfos["exporter"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
				APIVersion:      "client.authentication.k8s.io/v1",
				Command:         "false",
				InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
			}}
		}},
		{"exec plugin missing", func(kc *clientcmdapi.Config) {
			kc.AuthInfos["exporter"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
				APIVersion:      "client.authentication.k8s.io/v1",
				Command:         "/nonexistent/kubectl-login",
				InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
			}}
		}},
		{"token file missing", func(kc *clientcmdapi.Config) {
			kc.AuthInfos["exporter"] = &clientcmdapi.AuthInfo{TokenFile: "/nonexistent/token"}
		}},
		{"unknown context", func(kc *clientcmdapi.Config) { kc.CurrentContext = "gone" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newAPIServer(t, true, func(w http.ResponseWriter, _ *http.Request) { writePodList(w) })
			c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), tc.mutate))
			if v := check(c); v.Reason != provider.ReasonCredentialsUnavailable {
				t.Errorf("reason = %s (%s), want CredentialsUnavailable", v.Reason, v.Message)
			}
			if n := srv.hits.Load(); n != 0 {
				t.Errorf("API server got %d requests; nothing should be sent without credentials", n)
			}
		})
	}
}

// TestNotInCluster: without a kubeconfig the in-cluster configuration is
// used; outside a Pod the check says so instead of New failing. Not
// parallel: it sets the environment.
func TestNotInCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	c, err := New(&Entry{Name: "in-cluster", LabelSelector: testSelector}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New failed: %v; an unusable configuration is the check's business", err)
	}
	if v := check(c); v.Reason != provider.ReasonCredentialsUnavailable {
		t.Errorf("reason = %s (%s), want CredentialsUnavailable", v.Reason, v.Message)
	}
	if _, err := c.current(context.Background(), slog.New(slog.DiscardHandler)); !errors.Is(err, rest.ErrNotInCluster) {
		t.Errorf("err = %v, want rest.ErrNotInCluster", err)
	}
	if got := c.Targets(); len(got) != 1 || got[0].Name != TargetName {
		t.Errorf("Targets() = %v, want the apiserver target", got)
	}
}

// TestKubeconfigRepaired: a kubeconfig that does not parse does not stop
// the exporter, and once the file is fixed the next check uses it without a
// reload.
func TestKubeconfigRepaired(t *testing.T) {
	t.Parallel()
	srv := newAPIServer(t, true, func(w http.ResponseWriter, _ *http.Request) { writePodList(w) })
	good := kubeconfig(t, srv.URL, srv.caPEM(), nil)
	goodBytes, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte("apiVersion: v1\nclusters: [this is not\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newTestChecker(t, path)
	if v := check(c); v.Reason != provider.ReasonCredentialsUnavailable {
		t.Fatalf("broken kubeconfig: reason = %s (%s), want CredentialsUnavailable", v.Reason, v.Message)
	}
	if got := c.Targets()[0].Address; got != "" {
		t.Errorf("address = %q while the kubeconfig is broken, want empty", got)
	}
	if err := os.WriteFile(path, goodBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if v := check(c); v.Reason != provider.ReasonReady {
		t.Fatalf("repaired kubeconfig: reason = %s (%s), want Ready", v.Reason, v.Message)
	}
	if got := c.Targets()[0].Address; got != srv.URL {
		t.Errorf("address = %q, want %q", got, srv.URL)
	}
}

func TestContextSelectsCluster(t *testing.T) {
	t.Parallel()
	srv := newAPIServer(t, true, func(w http.ResponseWriter, _ *http.Request) { writePodList(w) })
	path := kubeconfig(t, "https://"+testnet.RefusedAddr(t), selfSignedPEM(t), func(kc *clientcmdapi.Config) {
		kc.Clusters["real"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: srv.caPEM()}
		kc.Contexts["real"] = &clientcmdapi.Context{Cluster: "real", AuthInfo: "exporter"}
	})
	c, err := New(&Entry{Name: "ctx", Kubeconfig: path, Context: "real", LabelSelector: testSelector}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if v := check(c); v.Reason != provider.ReasonReady {
		t.Errorf("reason = %s (%s), want Ready from the context's cluster", v.Reason, v.Message)
	}
}

func TestUnknownTarget(t *testing.T) {
	t.Parallel()
	srv := newAPIServer(t, true, func(w http.ResponseWriter, _ *http.Request) { writePodList(w) })
	c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), nil))
	if v := c.Check(context.Background(), slog.New(slog.DiscardHandler), "compute"); v.Reason != provider.ReasonUnknown {
		t.Errorf("reason = %s, want Unknown", v.Reason)
	}
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("API server got %d requests for an unknown target", n)
	}
}

// TestDebugLogCarriesNoToken: the check's log is what /probe?debug=true
// shows.
func TestDebugLogCarriesNoToken(t *testing.T) {
	t.Parallel()
	srv := newAPIServer(t, true, func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, apierrors.NewUnauthorized("Unauthorized"), nil)
	})
	c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), nil))
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if v := c.Check(context.Background(), logger, TargetName); v.Reason != provider.ReasonUnauthorized {
		t.Fatalf("reason = %s (%s), want Unauthorized", v.Reason, v.Message)
	}
	if !strings.Contains(buf.String(), "listing pods") {
		t.Errorf("debug log lacks the request: %s", buf.String())
	}
	if strings.Contains(buf.String(), testToken) {
		t.Errorf("debug log leaks the token: %s", buf.String())
	}
}

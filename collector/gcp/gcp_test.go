package gcp

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/egress-proxies/provider_health_exporter/internal/fakedns"

	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/internal/testnet"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

const (
	testProject = "crawl-prod-123"
	testToken   = "ya29.c.test-access-token"
	apiPath     = "/compute/v1/projects/" + testProject + "/aggregated/instances"
	// hang bounds a test that would otherwise wait forever; no assertion is
	// made on how fast anything is.
	hang = 20 * time.Second
)

// TestMain keeps Application Default Credentials on loopback for every test
// of the package, also one that reaches ADC by mistake: the metadata host is
// a local server that knows no service account, and no gcloud credentials
// of the machine are found. Tests that exercise ADC set their own values.
func TestMain(m *testing.M) {
	metadataServer := httptest.NewServer(http.NotFoundHandler())
	home, err := os.MkdirTemp("", "gcp-test-home")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for k, v := range map[string]string{
		"GCE_METADATA_HOST":              strings.TrimPrefix(metadataServer.URL, "http://"),
		"GOOGLE_APPLICATION_CREDENTIALS": "",
		"HOME":                           home,
	} {
		os.Setenv(k, v)
	}
	code := m.Run()
	metadataServer.Close()
	os.RemoveAll(home)
	// No goroutine may outlive its check (docs/configuration.md: "Timeouts"), timeouts included.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testKey is one RSA key for the whole run: generating one per test would
// cost more than the tests.
var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// tokenServer is a loopback OAuth token endpoint that runs the real
// service-account JWT-bearer flow: it checks the assertion's signature.
type tokenServer struct {
	*httptest.Server
	requests atomic.Int64
	// refuse makes it answer like Google does to a bad assertion.
	refuse bool
	// block makes it hold the request until the client gives up.
	block bool
}

func newTokenServer(t *testing.T, configure func(*tokenServer)) *tokenServer {
	t.Helper()
	ts := &tokenServer{}
	if configure != nil {
		configure(ts)
	}
	ts.Server = httptest.NewServer(http.HandlerFunc(ts.serve))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *tokenServer) serve(w http.ResponseWriter, r *http.Request) {
	ts.requests.Add(1)
	if ts.block {
		// The server notices a closed connection only once the body is read.
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
		return
	}
	if ts.refuse {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusBadRequest)
		w.Write(readTestdata(nil, "token-400-invalid-grant.json"))
		return
	}
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost || r.URL.Path != "/token" {
		http.Error(w, "bad token request", http.StatusBadRequest)
		return
	}
	if g := r.PostForm.Get("grant_type"); g != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		http.Error(w, "unexpected grant_type "+g, http.StatusBadRequest)
		return
	}
	if err := verifyJWT(r.PostForm.Get("assertion"), &testKey().PublicKey); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	fmt.Fprintf(w, `{"access_token":%q,"expires_in":3599,"token_type":"Bearer"}`, testToken)
}

// verifyJWT checks an RS256 assertion and that it asks for Compute scopes.
func verifyJWT(assertion string, pub *rsa.PublicKey) error {
	parts := strings.Split(assertion, ".")
	if len(parts) != 3 {
		return errors.New("assertion is not a JWT")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig); err != nil {
		return fmt.Errorf("assertion signature: %w", err)
	}
	claims, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return err
	}
	var c struct {
		Scope string `json:"scope"`
	}
	if err := json.Unmarshal(claims, &c); err != nil {
		return err
	}
	if !strings.Contains(c.Scope, "https://www.googleapis.com/auth/compute.readonly") {
		return fmt.Errorf("assertion scope %q lacks compute.readonly", c.Scope)
	}
	return nil
}

// writeServiceAccount writes a service-account key file whose token_uri is
// tokenURL and returns its path.
func writeServiceAccount(t *testing.T, dir, tokenURL, email string) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(testKey())
	if err != nil {
		t.Fatal(err)
	}
	sa := map[string]string{
		"type":                        "service_account",
		"project_id":                  testProject,
		"private_key_id":              "0123456789abcdef0123456789abcdef01234567",
		"private_key":                 string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":                email,
		"client_id":                   "104637219452394826614",
		"auth_uri":                    "https://accounts.google.com/o/oauth2/auth",
		"token_uri":                   tokenURL,
		"auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
		"universe_domain":             "googleapis.com",
	}
	b, err := json.MarshalIndent(sa, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sa-"+strings.SplitN(email, "@", 2)[0]+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readTestdata(t *testing.T, name string) []byte {
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "gcp", name))
	if err != nil {
		if t == nil {
			panic(err)
		}
		t.Fatal(err)
	}
	return b
}

// computeServer is a loopback Compute API serving one recorded answer. It
// fails the test on any request that is not the one a check must make.
type computeServer struct {
	*httptest.Server
	t        *testing.T
	status   int
	body     []byte
	ctype    string
	wantAuth string // expected Authorization header; empty: not checked
	filter   string
	requests atomic.Int64
	// cancelled is closed when a request's context ends before the handler
	// answered (set hold to make the handler wait for that).
	hold      time.Duration
	cancelled chan struct{}
}

func newComputeServer(t *testing.T, status int, bodyFile string) *computeServer {
	t.Helper()
	cs := &computeServer{
		t:         t,
		status:    status,
		wantAuth:  "Bearer " + testToken,
		filter:    DefaultFilter,
		ctype:     "application/json; charset=UTF-8",
		cancelled: make(chan struct{}),
	}
	if bodyFile != "" {
		cs.body = readTestdata(t, bodyFile)
		if strings.HasSuffix(bodyFile, ".html") {
			cs.ctype = "text/html; charset=UTF-8"
		}
	}
	cs.Server = httptest.NewUnstartedServer(http.HandlerFunc(cs.serve))
	return cs
}

func (cs *computeServer) start() *computeServer {
	cs.Start()
	cs.t.Cleanup(cs.Close)
	return cs
}

func (cs *computeServer) serve(w http.ResponseWriter, r *http.Request) {
	cs.requests.Add(1)
	if r.Method != http.MethodGet || r.URL.Path != apiPath {
		cs.t.Errorf("request %s %s, want GET %s", r.Method, r.URL.Path, apiPath)
	}
	q := r.URL.Query()
	params := 2
	if cs.filter == "" {
		params = 1 // no filter parameter at all
	}
	if q.Get("maxResults") != "1" || q.Get("filter") != cs.filter || len(q) != params {
		cs.t.Errorf("query %v, want exactly maxResults=1 and filter=%q", q, cs.filter)
	}
	if cs.wantAuth != "" && r.Header.Get("Authorization") != cs.wantAuth {
		cs.t.Errorf("Authorization %q, want %q", r.Header.Get("Authorization"), cs.wantAuth)
	}
	if v := r.Header.Get(checkIDHeader); v != "" {
		cs.t.Errorf("internal header %s leaked to the server: %q", checkIDHeader, v)
	}
	if cs.hold > 0 {
		select {
		case <-r.Context().Done():
			close(cs.cancelled)
			return
		case <-time.After(cs.hold):
		}
	}
	w.Header().Set("Content-Type", cs.ctype)
	w.WriteHeader(cs.status)
	w.Write(cs.body)
}

// newTestChecker builds a checker for endpoint with a service-account file
// whose token comes from tokens.
func newTestChecker(t *testing.T, endpoint string, tokens *tokenServer, opts ...provider.Option) *Checker {
	t.Helper()
	cfg := &Entry{
		Name:            "crawl-prod",
		Project:         testProject,
		Filter:          DefaultFilter,
		Endpoint:        endpoint,
		CredentialsFile: writeServiceAccount(t, t.TempDir(), tokens.URL+"/token", "exporter@crawl-prod-123.iam.gserviceaccount.com"),
	}
	c, err := New(cfg, slog.New(slog.DiscardHandler), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// check runs one check under budget and fails the test if it hangs.
func check(t *testing.T, c *Checker, budget time.Duration) provider.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	done := make(chan provider.Verdict, 1)
	go func() { done <- c.Check(ctx, slog.New(slog.DiscardHandler), TargetName) }()
	select {
	case v := <-done:
		if v.Capacity.Contradicts(v.Reason) {
			t.Errorf("capacity %s contradicts the verdict %s (%s)", v.Capacity, v.Reason, v.Message)
		}
		return v
	case <-time.After(hang):
		t.Fatalf("Check did not return within %s of a %s budget", hang, budget)
		return provider.Verdict{}
	}
}

// TestRecordedAnswers drives the real client over HTTP against every
// recorded answer: one request per check, the reason of docs/metrics.md's "Reasons".
func TestRecordedAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file    string
		status  int
		want    provider.Reason
		message string // a part of the verdict's message
	}{
		{"aggregated-instances.json", 200, provider.ReasonReady, "egress-proxy-7f9c2 in zones/us-central1-a"},
		{"aggregated-warnings-only.json", 200, provider.ReasonReady, "no managed instance"},
		{"aggregated-no-items.json", 200, provider.ReasonReady, "no managed instance"},
		{"error-403-service-disabled.json", 403, ReasonAPIDisabled, "accessNotConfigured"},
		{"error-403-forbidden.json", 403, provider.ReasonForbidden, "compute.instances.list"},
		{"error-403-rate-limit.json", 403, provider.ReasonRateLimited, "rateLimitExceeded"},
		{"error-401-unauthenticated.json", 401, provider.ReasonUnauthorized, "HTTP 401"},
		{"error-404-not-found.json", 404, provider.ReasonNotFound, "was not found"},
		{"error-400-invalid-filter.json", 400, provider.ReasonInvalidRequest, "Invalid list filter expression"},
		{"error-429-rate-limited.json", 429, provider.ReasonRateLimited, "Quota exceeded"},
		{"error-500-backend.json", 500, provider.ReasonServerError, "backendError"},
		{"error-503-unavailable.json", 503, provider.ReasonServerError, "HTTP 503"},
		{"error-502.html", 502, provider.ReasonServerError, "no JSON error in the body (text/html"},
		{"bad-200-truncated.json", 200, provider.ReasonBadResponse, "not an instance list"},
		{"bad-200-other-kind.json", 200, provider.ReasonBadResponse, `kind "compute#project"`},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			tokens := newTokenServer(t, nil)
			api := newComputeServer(t, tc.status, tc.file).start()
			c := newTestChecker(t, api.URL, tokens)
			v := check(t, c, 10*time.Second)
			if v.Reason != tc.want {
				t.Errorf("reason %s (%s), want %s", v.Reason, v.Message, tc.want)
			}
			if !strings.Contains(v.Message, tc.message) {
				t.Errorf("message %q does not contain %q", v.Message, tc.message)
			}
			if n := api.requests.Load(); n != 1 {
				t.Errorf("%d requests to Compute, want exactly 1", n)
			}
			if n := tokens.requests.Load(); n != 1 {
				t.Errorf("%d token requests, want 1", n)
			}
			if strings.Contains(v.Message, testToken) || strings.Contains(v.Message, "PRIVATE KEY") {
				t.Errorf("message leaks a secret: %q", v.Message)
			}
		})
	}
}

// TestFilter: the configured filter is sent as is; an empty one is left
// out, listing every instance.
func TestFilter(t *testing.T) {
	t.Parallel()
	for _, filter := range []string{`labels.team = "crawl" AND status = RUNNING`, ""} {
		t.Run(filter, func(t *testing.T) {
			t.Parallel()
			tokens := newTokenServer(t, nil)
			api := newComputeServer(t, 200, "aggregated-instances.json")
			api.filter = filter
			api.start()
			c, err := New(&Entry{
				Name: "crawl-prod", Project: testProject, Filter: filter, Endpoint: api.URL + "/",
				CredentialsFile: writeServiceAccount(t, t.TempDir(), tokens.URL+"/token", "exporter@crawl-prod-123.iam.gserviceaccount.com"),
			}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if v := check(t, c, 10*time.Second); v.Reason != provider.ReasonReady {
				t.Errorf("reason %s (%s)", v.Reason, v.Message)
			}
			if n := api.requests.Load(); n != 1 {
				t.Errorf("%d Compute requests, want 1", n)
			}
		})
	}
}

// TestEveryCheckIsOneRequest: consecutive and concurrent checks each make
// exactly one Compute request, and the token is fetched once and reused.
func TestEveryCheckIsOneRequest(t *testing.T) {
	t.Parallel()
	tokens := newTokenServer(t, nil)
	api := newComputeServer(t, 200, "aggregated-warnings-only.json").start()
	c := newTestChecker(t, api.URL, tokens)
	for i := 0; i < 3; i++ {
		if v := check(t, c, 10*time.Second); v.Reason != provider.ReasonReady {
			t.Fatalf("check %d: %s (%s)", i, v.Reason, v.Message)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if v := c.Check(ctx, slog.New(slog.DiscardHandler), TargetName); v.Reason != provider.ReasonReady {
				t.Errorf("concurrent check: %s (%s)", v.Reason, v.Message)
			}
		}()
	}
	wg.Wait()
	if n := api.requests.Load(); n != 11 {
		t.Errorf("%d Compute requests for 11 checks", n)
	}
	if n := tokens.requests.Load(); n != 1 {
		t.Errorf("%d token requests, want 1 (the token is cached)", n)
	}
}

// TestNoSocketOutlivesCheck: the connection a check opened is closed when
// the check is done, not kept idle for a next check minutes away (docs/configuration.md: "Timeouts").
func TestNoSocketOutlivesCheck(t *testing.T) {
	t.Parallel()
	tokens := newTokenServer(t, nil)
	api := newComputeServer(t, 200, "aggregated-instances.json")
	closed := make(chan struct{}, 16)
	api.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed <- struct{}{}
		}
	}
	api.start()
	c := newTestChecker(t, api.URL, tokens)
	if v := check(t, c, 10*time.Second); v.Reason != provider.ReasonReady {
		t.Fatalf("reason %s (%s)", v.Reason, v.Message)
	}
	select {
	case <-closed:
	case <-time.After(hang):
		t.Fatal("the check's connection to Compute was left open")
	}
}

// TestDeadline: a Compute that answers after 5 s gives Timeout at the
// budget, and the request is cancelled on the server's side.
func TestDeadline(t *testing.T) {
	t.Parallel()
	tokens := newTokenServer(t, nil)
	api := newComputeServer(t, 200, "aggregated-instances.json")
	api.hold = 5 * time.Second
	api.start()
	c := newTestChecker(t, api.URL, tokens)
	v := check(t, c, 300*time.Millisecond)
	if v.Reason != provider.ReasonTimeout {
		t.Errorf("reason %s (%s), want Timeout", v.Reason, v.Message)
	}
	select {
	case <-api.cancelled:
	case <-time.After(hang):
		t.Fatal("the server never saw the request cancelled")
	}
	if n := api.requests.Load(); n != 1 {
		t.Errorf("%d Compute requests, want 1", n)
	}
}

// TestTokenDeadline: a token endpoint that hangs is bounded by the check too.
func TestTokenDeadline(t *testing.T) {
	t.Parallel()
	tokens := newTokenServer(t, func(ts *tokenServer) { ts.block = true })
	api := newComputeServer(t, 200, "aggregated-instances.json").start()
	c := newTestChecker(t, api.URL, tokens)
	if v := check(t, c, 300*time.Millisecond); v.Reason != provider.ReasonTimeout {
		t.Errorf("reason %s (%s), want Timeout", v.Reason, v.Message)
	}
	if n := api.requests.Load(); n != 0 {
		t.Errorf("%d Compute requests without a token", n)
	}
}

// TestTransportFailures covers the reasons that come from below HTTP.
func TestTransportFailures(t *testing.T) {
	t.Parallel()

	// dropper accepts connections and closes them before any answer.
	dropper := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				io.CopyN(io.Discard, conn, 1)
				conn.Close()
			}
		}()
		return l.Addr().String()
	}

	for _, tc := range []struct {
		name     string
		endpoint func(t *testing.T, tokens *tokenServer) (string, []provider.Option)
		want     provider.Reason
	}{
		{"refused", func(t *testing.T, _ *tokenServer) (string, []provider.Option) {
			return "http://" + testnet.RefusedAddr(t), nil
		}, provider.ReasonUnreachable},
		{"dropped before an answer", func(t *testing.T, _ *tokenServer) (string, []provider.Option) {
			return "http://" + dropper(t), nil
		}, provider.ReasonUnreachable},
		{"unknown CA", func(t *testing.T, _ *tokenServer) (string, []provider.Option) {
			s := httptest.NewTLSServer(http.NotFoundHandler())
			t.Cleanup(s.Close)
			return s.URL, nil
		}, provider.ReasonTLSError},
		{"HTTP answer to HTTPS", func(t *testing.T, _ *tokenServer) (string, []provider.Option) {
			s := httptest.NewServer(http.NotFoundHandler())
			t.Cleanup(s.Close)
			return "https://" + strings.TrimPrefix(s.URL, "http://"), nil
		}, provider.ReasonTLSError},
		{"name does not resolve", func(t *testing.T, _ *tokenServer) (string, []provider.Option) {
			return "http://compute.nxdomain.test:8443", []provider.Option{provider.WithDialer(fakedns.Dialer(t))}
		}, provider.ReasonDNSFailed},
		{"token endpoint refuses the assertion", func(t *testing.T, tokens *tokenServer) (string, []provider.Option) {
			tokens.refuse = true
			return newComputeServer(t, 200, "aggregated-instances.json").start().URL, nil
		}, provider.ReasonCredentialsUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tokens := newTokenServer(t, nil)
			endpoint, opts := tc.endpoint(t, tokens)
			c := newTestChecker(t, endpoint, tokens, opts...)
			if v := check(t, c, 10*time.Second); v.Reason != tc.want {
				t.Errorf("reason %s (%s), want %s", v.Reason, v.Message, tc.want)
			}
		})
	}
}

// TestTokenEndpointUnreachable is the trap of docs/metrics.md's "Reasons": a token endpoint
// that refuses connections looks like a dial error, but the verdict is
// about the credentials, not about Compute.
func TestTokenEndpointUnreachable(t *testing.T) {
	t.Parallel()
	api := newComputeServer(t, 200, "aggregated-instances.json").start()
	tokenURL := "http://" + testnet.RefusedAddr(t) + "/token"
	cfg := &Entry{
		Name: "crawl-prod", Project: testProject, Filter: DefaultFilter, Endpoint: api.URL,
		CredentialsFile: writeServiceAccount(t, t.TempDir(), tokenURL, "exporter@crawl-prod-123.iam.gserviceaccount.com"),
	}
	c, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v := check(t, c, 10*time.Second); v.Reason != provider.ReasonCredentialsUnavailable {
		t.Errorf("reason %s (%s), want CredentialsUnavailable", v.Reason, v.Message)
	}
	if n := api.requests.Load(); n != 0 {
		t.Errorf("%d Compute requests without a token", n)
	}
}

// TestCredentialsFileContents: what the file holds is the check's business.
// A broken file gives CredentialsUnavailable and no request; a fixed or
// rotated file is picked up at the next check without a new Checker.
func TestCredentialsFileContents(t *testing.T) {
	t.Parallel()
	tokens := newTokenServer(t, nil)
	api := newComputeServer(t, 200, "aggregated-instances.json").start()
	c := newTestChecker(t, api.URL, tokens)
	good, err := os.ReadFile(c.credentialsFile)
	if err != nil {
		t.Fatal(err)
	}
	var sa map[string]string
	if err := json.Unmarshal(good, &sa); err != nil {
		t.Fatal(err)
	}
	withField := func(k, v string) []byte {
		m := map[string]string{}
		for k, v := range sa {
			m[k] = v
		}
		m[k] = v
		b, _ := json.Marshal(m)
		return b
	}

	for _, tc := range []struct {
		name    string
		content []byte // nil: remove the file
	}{
		{"not JSON", []byte("-----BEGIN RSA PRIVATE KEY-----\nnot a credentials file\n")},
		{"no type", []byte(`{"client_email":"exporter@crawl-prod-123.iam.gserviceaccount.com"}`)},
		{"unknown type", withField("type", "api_key")},
		{"private key garbage", withField("private_key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")},
		{"file removed", nil},
		// Files that would block or exhaust a plain read: refused, and
		// the check returns (docs/security.md: "What the exporter bounds").
		{"named pipe", []byte("fifo")},
		{"symlink to /dev/zero", []byte("zero")},
		{"over the cap", bytes.Repeat([]byte(" "), 1<<20+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = os.Remove(c.credentialsFile)
			switch string(tc.content) {
			case "fifo":
				if err := syscall.Mkfifo(c.credentialsFile, 0o600); err != nil {
					t.Fatal(err)
				}
			case "zero":
				if err := os.Symlink("/dev/zero", c.credentialsFile); err != nil {
					t.Fatal(err)
				}
			}
			if tc.content == nil || string(tc.content) == "fifo" || string(tc.content) == "zero" {
				// the file is as the case wants it
			} else if err := os.WriteFile(c.credentialsFile, tc.content, 0o600); err != nil {
				t.Fatal(err)
			}
			before := api.requests.Load()
			v := check(t, c, 10*time.Second)
			if v.Reason != provider.ReasonCredentialsUnavailable {
				t.Errorf("reason %s (%s), want CredentialsUnavailable", v.Reason, v.Message)
			}
			if strings.Contains(v.Message, "AAAA") || strings.Contains(v.Message, "not a credentials file") {
				t.Errorf("message quotes the file: %q", v.Message)
			}
			if n := api.requests.Load() - before; n != 0 {
				t.Errorf("%d Compute requests with broken credentials", n)
			}
		})
	}

	// Fixed again, under another identity: picked up without a reload, with
	// a new token for the new key.
	_ = os.Remove(c.credentialsFile)
	if err := os.WriteFile(c.credentialsFile, withField("client_email", "rotated@crawl-prod-123.iam.gserviceaccount.com"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokensBefore := tokens.requests.Load()
	if v := check(t, c, 10*time.Second); v.Reason != provider.ReasonReady {
		t.Errorf("after the fix: reason %s (%s), want Ready", v.Reason, v.Message)
	}
	if n := tokens.requests.Load() - tokensBefore; n != 1 {
		t.Errorf("%d token requests after rotation, want 1", n)
	}
}

// TestApplicationDefaultCredentials covers ADC, with the metadata server
// and the gcloud configuration kept on loopback and in a temp dir.
func TestApplicationDefaultCredentials(t *testing.T) {
	metadataNoAccount := httptest.NewServer(http.NotFoundHandler())
	defer metadataNoAccount.Close()

	for _, tc := range []struct {
		name string
		// setup returns GCE_METADATA_HOST and GOOGLE_APPLICATION_CREDENTIALS.
		setup func(t *testing.T, tokens *tokenServer) (metadataHost, appCreds string)
		want  provider.Reason
	}{
		{"no credentials, metadata server refuses", func(t *testing.T, _ *tokenServer) (string, string) {
			return testnet.RefusedAddr(t), ""
		}, provider.ReasonCredentialsUnavailable},
		{"no credentials, VM without service account", func(_ *testing.T, _ *tokenServer) (string, string) {
			return strings.TrimPrefix(metadataNoAccount.URL, "http://"), ""
		}, provider.ReasonCredentialsUnavailable},
		{"GOOGLE_APPLICATION_CREDENTIALS names a missing file", func(t *testing.T, _ *tokenServer) (string, string) {
			return testnet.RefusedAddr(t), filepath.Join(t.TempDir(), "missing.json")
		}, provider.ReasonCredentialsUnavailable},
		{"GOOGLE_APPLICATION_CREDENTIALS names a service account", func(t *testing.T, tokens *tokenServer) (string, string) {
			return testnet.RefusedAddr(t), writeServiceAccount(t, t.TempDir(), tokens.URL+"/token", "adc@crawl-prod-123.iam.gserviceaccount.com")
		}, provider.ReasonReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokens := newTokenServer(t, nil)
			metadataHost, appCreds := tc.setup(t, tokens)
			t.Setenv("GCE_METADATA_HOST", metadataHost)
			t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", appCreds)
			t.Setenv("HOME", t.TempDir())

			api := newComputeServer(t, 200, "aggregated-instances.json").start()
			c, err := New(&Entry{
				Name: "crawl-prod", Project: testProject, Filter: DefaultFilter, Endpoint: api.URL,
			}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("New without credentials must not fail: %v", err)
			}
			defer c.Close()
			v := check(t, c, 10*time.Second)
			if v.Reason != tc.want {
				t.Errorf("reason %s (%s), want %s", v.Reason, v.Message, tc.want)
			}
			wantRequests := int64(0)
			if tc.want == provider.ReasonReady {
				wantRequests = 1
			}
			if n := api.requests.Load(); n != wantRequests {
				t.Errorf("%d Compute requests, want %d", n, wantRequests)
			}
		})
	}
}

func TestTargetsAndClose(t *testing.T) {
	t.Parallel()
	tokens := newTokenServer(t, nil)
	api := newComputeServer(t, 200, "aggregated-instances.json").start()
	c := newTestChecker(t, api.URL, tokens)
	want := []provider.Target{{Name: "compute", Address: "projects/" + testProject}}
	if got := c.Targets(); len(got) != 1 || got[0] != want[0] {
		t.Errorf("Targets() = %v, want %v", got, want)
	}
	if v := check(t, c, 10*time.Second); v.Reason != provider.ReasonReady {
		t.Fatalf("reason %s (%s)", v.Reason, v.Message)
	}
	if v := check(t, c, 10*time.Second); !Reasons().Contains(v.Reason) {
		t.Errorf("reason %s not in the gcp set", v.Reason)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if v := check(t, c, 10*time.Second); v.Reason != provider.ReasonUnknown {
		t.Errorf("check after Close: %s, want Unknown", v.Reason)
	}
	if v := c.Check(context.Background(), slog.New(slog.DiscardHandler), "apiserver"); v.Reason != provider.ReasonUnknown {
		t.Errorf("unknown target: %s, want Unknown", v.Reason)
	}
	if n := api.requests.Load(); n != 2 {
		t.Errorf("%d Compute requests, want 2", n)
	}
}

// BenchmarkCheck measures one live check against a loopback Compute, token
// cached: the exporter's own cost per check.
func BenchmarkCheck(b *testing.B) {
	tokens := &tokenServer{}
	tokens.Server = httptest.NewServer(http.HandlerFunc(tokens.serve))
	defer tokens.Close()
	body := readTestdata(nil, "aggregated-instances.json")
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.Write(body)
	}))
	defer api.Close()
	dir := b.TempDir()
	der, err := x509.MarshalPKCS8PrivateKey(testKey())
	if err != nil {
		b.Fatal(err)
	}
	sa, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": testProject, "private_key_id": "1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "bench@crawl-prod-123.iam.gserviceaccount.com", "token_uri": tokens.URL + "/token",
	})
	path := filepath.Join(dir, "sa.json")
	if err := os.WriteFile(path, sa, 0o600); err != nil {
		b.Fatal(err)
	}
	c, err := New(&Entry{
		Name: "bench", Project: testProject, Filter: DefaultFilter, Endpoint: api.URL, CredentialsFile: path,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	logger := slog.New(slog.DiscardHandler)
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if v := c.Check(ctx, logger, TargetName); v.Reason != provider.ReasonReady {
			b.Fatalf("reason %s (%s)", v.Reason, v.Message)
		}
		cancel()
	}
}

// TestThroughEngine runs the checker under the framework: one Compute
// request for the first scrape, none for scrapes within min_interval, and
// a slow Compute cut at the scrape budget with the request cancelled.
func TestThroughEngine(t *testing.T) {
	t.Parallel()
	tokens := newTokenServer(t, nil)
	api := newComputeServer(t, 200, "aggregated-instances.json").start()
	slow := newComputeServer(t, 200, "aggregated-instances.json")
	slow.hold = 5 * time.Second
	slow.start()

	e := engine.NewEngine(slog.New(slog.DiscardHandler))
	defer e.Close()
	cached, slowChecker := newTestChecker(t, api.URL, tokens), newTestChecker(t, slow.URL, tokens)
	if err := e.Load([]engine.Entry{
		{Kind: Name, Name: "cached", Reasons: Reasons(), Timeout: 10 * time.Second, MinInterval: time.Hour,
			Build: func() (provider.Checker, error) { return cached, nil }},
		{Kind: Name, Name: "slow", Reasons: Reasons(), Timeout: 10 * time.Second,
			Build: func() (provider.Checker, error) { return slowChecker, nil }},
	}); err != nil {
		t.Fatal(err)
	}

	for i := 0; i < 4; i++ {
		res, err := e.Run(context.Background(), engine.Request{Name: "cached"})
		if err != nil {
			t.Fatal(err)
		}
		if r := res[0].Targets[0]; r.Reason != provider.ReasonReady {
			t.Fatalf("scrape %d: %s (%s)", i, r.Reason, r.Message)
		}
	}
	if n := api.requests.Load(); n != 1 {
		t.Errorf("%d Compute requests for 4 scrapes within min_interval, want 1", n)
	}

	res, err := e.Run(context.Background(), engine.Request{Name: "slow", ScrapeTimeout: time.Second, Offset: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0].Targets[0]; r.Reason != provider.ReasonTimeout {
		t.Errorf("slow Compute: %s (%s), want Timeout", r.Reason, r.Message)
	}
	select {
	case <-slow.cancelled:
	case <-time.After(hang):
		t.Fatal("the slow request was not cancelled at the scrape deadline")
	}
}

// TestNoSecretInDebugLog runs checks at debug level, through a token fetch,
// and looks for the access token, the signed assertion and the private key
// in everything that was logged.
func TestNoSecretInDebugLog(t *testing.T) {
	t.Parallel()
	tokens := newTokenServer(t, nil)
	api := newComputeServer(t, 200, "aggregated-instances.json").start()
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := &Entry{
		Name: "crawl-prod", Project: testProject, Filter: DefaultFilter, Endpoint: api.URL,
		CredentialsFile: writeServiceAccount(t, t.TempDir(), tokens.URL+"/token", "exporter@crawl-prod-123.iam.gserviceaccount.com"),
	}
	c, err := New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v := c.Check(ctx, logger, TargetName)
		cancel()
		if v.Reason != provider.ReasonReady {
			t.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
		}
	}
	key, err := os.ReadFile(cfg.CredentialsFile)
	if err != nil {
		t.Fatal(err)
	}
	var sa struct {
		PrivateKey string `json:"private_key"`
	}
	if err := json.Unmarshal(key, &sa); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	logged := buf.String()
	mu.Unlock()
	for what, secret := range map[string]string{
		"access token":    testToken,
		"JWT assertion":   "eyJ", // base64 of '{"', the start of every JWT
		"private key":     strings.Split(strings.TrimSpace(sa.PrivateKey), "\n")[1],
		"bearer header":   "Bearer ",
		"grant assertion": "assertion=",
	} {
		if strings.Contains(logged, secret) {
			t.Errorf("the %s appears in the debug log", what)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

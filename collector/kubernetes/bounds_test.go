package kubernetes

import (
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestRedirectIsNotFollowed: an API server that redirects is BadResponse
// with the status and Location, never Ready on another server's word, and
// the other server receives nothing.
func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int64
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
		writePodList(w)
	}))
	t.Cleanup(other.Close)
	srv := newAPIServer(t, true, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusFound)
	})
	v := check(newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), nil)))
	if v.Reason != provider.ReasonBadResponse || !strings.Contains(v.Message, "302") || !strings.Contains(v.Message, other.URL) {
		t.Errorf("verdict %s (%s), want BadResponse with the status and Location", v.Reason, v.Message)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
}

// TestHugeListIsCut: a server that ignores limit=1 and sends an endless
// list is BadResponse naming the limit.
func TestHugeListIsCut(t *testing.T) {
	t.Parallel()
	pod := `{"metadata":{"name":"proxy","namespace":"egress","labels":{"app.kubernetes.io/managed-by":"egress-proxies-operator"}}},`
	srv := newAPIServer(t, true, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[`))
		chunk := []byte(strings.Repeat(pod, 1000))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	v := check(newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), nil)))
	if v.Reason != provider.ReasonBadResponse || !strings.Contains(v.Message, "limit of 4 MiB") {
		t.Errorf("verdict %s (%s), want BadResponse naming the limit", v.Reason, v.Message)
	}
}

// TestHugeHeadersAreRefused: an API server that answers with 9 MB of
// headers, over HTTP/1.1 or HTTP/2 (client-go's own HTTP/2 transport), is
// BadResponse naming the header limit (provider.MaxHeaderBytes); 32 KiB of
// headers pass.
func TestHugeHeadersAreRefused(t *testing.T) {
	t.Parallel()
	value := strings.Repeat("h", 8<<10)
	for _, h2 := range []bool{false, true} {
		for _, tc := range []struct {
			name    string
			headers int
			want    provider.Reason
		}{
			{"9 MB", 1100, provider.ReasonBadResponse},
			{"32 KiB", 4, provider.ReasonReady},
		} {
			name := tc.name + " over HTTP/1.1"
			if h2 {
				name = tc.name + " over HTTP/2"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if (r.ProtoMajor == 2) != h2 {
						http.Error(w, "wrong protocol", http.StatusHTTPVersionNotSupported)
						return
					}
					for i := range tc.headers {
						w.Header().Set(fmt.Sprintf("X-Padding-%d", i), value)
					}
					writePodList(w)
				}))
				srv.EnableHTTP2 = h2
				srv.Config.ErrorLog = log.New(io.Discard, "", 0)
				srv.StartTLS()
				t.Cleanup(srv.Close)
				ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
				v := check(newTestChecker(t, kubeconfig(t, srv.URL, ca, nil)))
				if v.Reason != tc.want || (tc.want == provider.ReasonBadResponse && !strings.Contains(v.Message, "limit of 64 KiB")) {
					t.Errorf("verdict %s (%s), want %s (naming the limit when refused)", v.Reason, v.Message, tc.want)
				}
			})
		}
	}
}

package gcp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies/provider_health_exporter/collector"
)

// endless writes a never-ending JSON-looking body until the client goes.
func endless(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_, _ = w.Write([]byte(`{"kind":"compute#instanceAggregatedList","items":{"zones/a":{"instances":[`))
	chunk := []byte(strings.Repeat(`{"name":"proxy","status":"RUNNING"},`, 1000))
	for r.Context().Err() == nil {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// TestBodyOverTheLimit: an endless or huge Compute answer is BadResponse
// naming the limit, read no further than it.
func TestBodyOverTheLimit(t *testing.T) {
	t.Parallel()
	tokens := newTokenServer(t, nil)
	api := httptest.NewServer(http.HandlerFunc(endless))
	t.Cleanup(api.Close)
	c := newTestChecker(t, api.URL, tokens)
	v := check(t, c, 30*time.Second)
	if v.Reason != collector.ReasonBadResponse || !strings.Contains(v.Message, "limit of 4 MiB") {
		t.Errorf("verdict %s (%s), want BadResponse naming the limit", v.Reason, v.Message)
	}
}

// TestRedirectsAreNotFollowed: a 302 from Compute or from the token
// endpoint is BadResponse / CredentialsUnavailable with the Location, and
// the server it points to receives nothing, least of all the token.
func TestRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(other.Close)
	redirect := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusFound)
	})

	t.Run("Compute", func(t *testing.T) {
		tokens := newTokenServer(t, nil)
		api := httptest.NewServer(redirect)
		t.Cleanup(api.Close)
		v := check(t, newTestChecker(t, api.URL, tokens), 10*time.Second)
		if v.Reason != collector.ReasonBadResponse || !strings.Contains(v.Message, "302") || !strings.Contains(v.Message, other.URL) {
			t.Errorf("verdict %s (%s), want BadResponse with the status and Location", v.Reason, v.Message)
		}
	})
	t.Run("token endpoint", func(t *testing.T) {
		tokens := newTokenServer(t, nil)
		tokens.Config.Handler = redirect
		api := newComputeServer(t, 200, "aggregated-instances.json").start()
		v := check(t, newTestChecker(t, api.URL, tokens), 10*time.Second)
		if v.Reason != collector.ReasonCredentialsUnavailable || !strings.Contains(v.Message, "302") {
			t.Errorf("verdict %s (%s), want CredentialsUnavailable with the status", v.Reason, v.Message)
		}
		if n := api.requests.Load(); n != 0 {
			t.Errorf("%d Compute requests without a token", n)
		}
	})
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
}

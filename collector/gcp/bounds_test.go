package gcp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egress-proxies/provider_health_exporter/provider"
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
	if v.Reason != provider.ReasonBadResponse || !strings.Contains(v.Message, "limit of 4 MiB") {
		t.Errorf("verdict %s (%s), want BadResponse naming the limit", v.Reason, v.Message)
	}
}

// hugeHeaders wraps h so that its answers carry 9 MB of headers.
func hugeHeaders(h http.Handler) http.Handler {
	value := strings.Repeat("h", 8<<10)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 1100 {
			w.Header().Set(fmt.Sprintf("X-Padding-%d", i), value)
		}
		h.ServeHTTP(w, r)
	})
}

// TestHeadersOverTheLimit: a Compute answer or a token endpoint answer with
// 9 MB of headers is refused at provider.MaxHeaderBytes: BadResponse, or
// CredentialsUnavailable for the token, as for a body over its limit, each
// naming the limit.
func TestHeadersOverTheLimit(t *testing.T) {
	t.Parallel()
	t.Run("Compute", func(t *testing.T) {
		t.Parallel()
		tokens := newTokenServer(t, nil)
		api := newComputeServer(t, 200, "aggregated-instances.json")
		api.Config.Handler = hugeHeaders(api.Config.Handler)
		api.start()
		v := check(t, newTestChecker(t, api.URL, tokens), 30*time.Second)
		if v.Reason != provider.ReasonBadResponse || !strings.Contains(v.Message, "headers are larger than the exporter's limit of 64 KiB") {
			t.Errorf("verdict %s (%s), want BadResponse naming the header limit", v.Reason, v.Message)
		}
	})
	t.Run("token endpoint", func(t *testing.T) {
		t.Parallel()
		tokens := newTokenServer(t, nil)
		tokens.Config.Handler = hugeHeaders(tokens.Config.Handler)
		api := newComputeServer(t, 200, "aggregated-instances.json").start()
		v := check(t, newTestChecker(t, api.URL, tokens), 30*time.Second)
		if v.Reason != provider.ReasonCredentialsUnavailable || !strings.Contains(v.Message, "headers are larger than the exporter's limit of 64 KiB") {
			t.Errorf("verdict %s (%s), want CredentialsUnavailable naming the header limit", v.Reason, v.Message)
		}
		if n := api.requests.Load(); n != 0 {
			t.Errorf("%d Compute requests without a token", n)
		}
	})
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
		if v.Reason != provider.ReasonBadResponse || !strings.Contains(v.Message, "302") || !strings.Contains(v.Message, other.URL) {
			t.Errorf("verdict %s (%s), want BadResponse with the status and Location", v.Reason, v.Message)
		}
	})
	t.Run("token endpoint", func(t *testing.T) {
		tokens := newTokenServer(t, nil)
		tokens.Config.Handler = redirect
		api := newComputeServer(t, 200, "aggregated-instances.json").start()
		v := check(t, newTestChecker(t, api.URL, tokens), 10*time.Second)
		if v.Reason != provider.ReasonCredentialsUnavailable || !strings.Contains(v.Message, "302") {
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

// TestRegionsConcurrency: regions.get of 20 regions runs at most
// regionsConcurrency at a time, and uses that many. Each answer is held
// until regionsConcurrency requests are in flight (or no more can come),
// so a fetch asking one region after another never gets an answer, and
// one asking all at once shows more in flight.
func TestRegionsConcurrency(t *testing.T) {
	t.Parallel()
	const total = 20
	var (
		mu                         sync.Mutex
		inflight, started, maxSeen int
		release                    = make(chan struct{})
	)
	regions := make([]string, total)
	for i := range regions {
		regions[i] = fmt.Sprintf("test-region%d", i+1)
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == apiPath {
			w.Header().Set("Content-Type", "application/json")
			w.Write(readTestdata(t, "aggregated-instances.json"))
			return
		}
		mu.Lock()
		inflight++
		started++
		maxSeen = max(maxSeen, inflight)
		wait := release
		if inflight >= regionsConcurrency || started == total {
			close(release)
			release = make(chan struct{})
		}
		mu.Unlock()
		select {
		case <-wait:
		case <-r.Context().Done():
		}
		// Out of flight before the answer leaves: the worker that gets it
		// may ask its next region at once.
		mu.Lock()
		inflight--
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(applyFieldMask(t, readTestdata(t, "regions-ok.json"), quotaFieldMask))
	}))
	t.Cleanup(api.Close)
	c, _ := newPlacementChecker(t, api.URL, nil, func(g *Entry) { g.Regions, g.MinQuotaHeadroom = regions, testMins })
	if v := check(t, c, hang); v.Reason != provider.ReasonReady {
		t.Fatalf("got %s %q", v.Reason, v.Message)
	}
	mu.Lock()
	defer mu.Unlock()
	if started != total || maxSeen != regionsConcurrency {
		t.Errorf("%d regions asked, at most %d at once; want %d, %d at once", started, maxSeen, total, regionsConcurrency)
	}
}

// huge is a string of n bytes that would multiply memory if every verdict,
// page and log line carried it whole.
func huge(n int) string { return strings.Repeat("x", n) }

// TestProviderStringsBounded: a 4 MB error message or instance name in
// the list call's answer (inside its 4 MiB limit), and a 200 KB quota
// warning or error message in a regions.get or images.get answer (inside
// their 256 KiB limit), reach the verdict, the details and the log cut to
// provider.MaxProviderString, with the marker saying so; a region or image
// answer over its limit is BadResponse naming the limit.
func TestProviderStringsBounded(t *testing.T) {
	t.Parallel()
	const big, small = 4_000_000, 200_000
	errorBody := func(code, size int, reason string) []byte {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": huge(size),
			"errors": []map[string]string{{"message": "m", "domain": "global", "reason": reason}}}})
		return b
	}
	warning := func(size int) []byte {
		b, _ := json.Marshal(map[string]any{"status": "UP", "quotaStatusWarning": map[string]any{"code": "QUOTA_INFO_UNAVAILABLE", "message": huge(size)}})
		return b
	}
	instance, _ := json.Marshal(map[string]any{"kind": aggregatedListKind,
		"items": map[string]any{"zones/us-central1-a": map[string]any{"instances": []map[string]string{{"name": huge(big)}}}}})
	for _, tc := range []struct {
		name                string
		list, region, image []byte
		status              int // of the answer carrying the huge string
		regions             bool
		sourceImage         bool
		want                provider.Reason
		message             string // in the message; "" = the cut marker
	}{
		{"instance name", instance, nil, nil, http.StatusOK, false, false, provider.ReasonReady, ""},
		{"list error", errorBody(403, big, "forbidden"), nil, nil, http.StatusForbidden, false, false, provider.ReasonForbidden, ""},
		{"quota status warning", nil, warning(small), nil, http.StatusOK, true, false, provider.ReasonReady, ""},
		{"regions.get error", nil, errorBody(500, small, "backendError"), nil, http.StatusInternalServerError, true, false, provider.ReasonServerError, ""},
		{"image not found", nil, nil, errorBody(404, small, "notFound"), http.StatusNotFound, false, true, ReasonImageUnavailable, ""},
		{"region answer over its limit", nil, warning(big), nil, http.StatusOK, true, false, provider.ReasonBadResponse,
			"larger than the exporter's limit of 256 KiB for a region or an image"},
		{"image answer over its limit", nil, nil, errorBody(404, big, "notFound"), http.StatusNotFound, false, true, provider.ReasonBadResponse,
			"larger than the exporter's limit of 256 KiB for a region or an image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				body, status := readTestdata(t, "aggregated-instances.json"), http.StatusOK
				switch {
				case r.URL.Path == apiPath && tc.list != nil:
					body, status = tc.list, tc.status
				case strings.Contains(r.URL.Path, "/regions/"):
					body, status = tc.region, tc.status
				case strings.Contains(r.URL.Path, "/images/"):
					body, status = tc.image, tc.status
				}
				w.WriteHeader(status)
				w.Write(body)
			}))
			t.Cleanup(api.Close)
			log := &syncBuffer{}
			c, _ := newPlacementChecker(t, api.URL, log, func(g *Entry) {
				if tc.regions {
					g.Regions, g.MinQuotaHeadroom = []string{"us-central1", "us-east1"}, testMins
				}
				if tc.sourceImage {
					g.SourceImage = debianImage
				}
			})
			// Debug level: every log line a check can write.
			debug := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c.logger = debug
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			defer cancel()
			v := c.Check(ctx, debug, TargetName)
			if v.Reason != tc.want {
				t.Errorf("got %s, want %s", v.Reason, tc.want)
			}
			// The marker adds a few bytes to the bound.
			const bound = provider.MaxProviderString + 64
			want := tc.message
			if want == "" {
				want = "[cut: "
			}
			if len(v.Message) > bound || !strings.Contains(v.Message, want) {
				t.Errorf("message of %d bytes (bound %d), or without %q: %.300q", len(v.Message), bound, want, v.Message)
			}
			if v.Facts != nil {
				for k, d := range v.Facts.Details() {
					if len(d) > bound {
						t.Errorf("details[%q] is %d bytes", k, len(d))
					}
				}
			}
			for line := range strings.Lines(log.String()) {
				if len(line) > 2*bound {
					t.Errorf("a log line of %d bytes: %.200q", len(line), line)
				}
			}
		})
	}
}

// TestBoundedEach: however many items, at most limit calls run at once,
// each item is called once, and the next starts as soon as one returns.
// synctest.Wait lets every goroutine block before anything is counted.
func TestBoundedEach(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 7, 8, 9, 64, 500} {
		synctest.Test(t, func(t *testing.T) {
			var (
				mu       sync.Mutex
				running  int
				called   = make([]int, n)
				proceeds = make(chan struct{})
			)
			done := make(chan struct{})
			go func() {
				boundedEach(n, regionsConcurrency, func(i int) {
					mu.Lock()
					running++
					called[i]++
					mu.Unlock()
					<-proceeds
					mu.Lock()
					running--
					mu.Unlock()
				})
				close(done)
			}()
			for left := n; left > 0; left-- {
				synctest.Wait()
				mu.Lock()
				if want := min(left, regionsConcurrency); running != want {
					t.Fatalf("n=%d, %d left: %d running, want %d", n, left, running, want)
				}
				mu.Unlock()
				proceeds <- struct{}{}
			}
			<-done
			for i, c := range called {
				if c != 1 {
					t.Errorf("n=%d: item %d called %d times", n, i, c)
				}
			}
		})
	}
}

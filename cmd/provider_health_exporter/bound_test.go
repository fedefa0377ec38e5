package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAbandonedDebugProbesShareOneCheck: 1,000 debug probes of one GCP
// entry, each dropped by its client after 50ms while the Compute API hangs,
// make one Compute request between them, counted at the fake API. Before,
// each debug probe ran a check of its own that outlived its caller.
func TestAbandonedDebugProbesShareOneCheck(t *testing.T) {
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1")
	release := make(chan struct{})
	var computeRequests atomic.Int64
	arrived := make(chan struct{})
	compute := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if computeRequests.Add(1) == 1 {
			close(arrived)
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"compute#instanceAggregatedList","items":{}}`)
	}))
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"test-token","expires_in":3599,"token_type":"Bearer"}`)
	}))
	defer tokens.Close()
	// Closed before the servers, so the check in flight can finish.
	defer compute.Close()
	defer close(release)

	dir := t.TempDir()
	creds := filepath.Join(dir, "gcp.json")
	if err := os.WriteFile(creds, []byte(serviceAccountJSON(t, tokens.URL+"/token")), 0o600); err != nil {
		t.Fatal(err)
	}
	// A timeout far beyond the test, so however slow the machine, the one
	// check is still in flight when the last probe arrives.
	path := filepath.Join(dir, "provider_health.yml")
	body := fmt.Sprintf("gcp:\n  - name: crawl-prod\n    project: crawl-prod-123\n    credentials_file: %s\n    endpoint: %s\n    timeout: 10m\n", creds, compute.URL)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	x := newExporter(exporterOptions{
		logger:      slog.New(slog.DiscardHandler),
		configFile:  path,
		entries:     entries,
		metricsPath: "/metrics",
	})
	if err := x.reload(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(x.handler())
	defer x.engine.Close()
	defer srv.Close()

	var wg sync.WaitGroup
	sem := make(chan struct{}, 50)
	for range 1000 {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/probe?name=crawl-prod&debug=true", nil)
			if err != nil {
				t.Error(err)
				return
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	// The one check may still be fetching its token (slow under -race):
	// wait for its request, however long that takes.
	<-arrived
	if n := computeRequests.Load(); n != 1 {
		t.Errorf("1000 abandoned debug probes made %d Compute requests, want 1", n)
	}
	st, err := x.engine.Status("crawl-prod")
	if err != nil {
		t.Fatal(err)
	}
	// A probe whose client gave up before its handler ran counts nothing.
	if c := st[0].Checks; c["live"] != 1 || c["shared"] > 999 {
		t.Errorf("checks %v, want 1 live, the rest shared", c)
	}
}

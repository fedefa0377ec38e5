package gcp

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// quotaAPI is one loopback Compute answering the list call (computeServer)
// and regions.get (regionsServer) at the same endpoint.
func quotaAPI(t *testing.T, answers map[string]recorded) (*httptest.Server, *computeServer, *regionsServer) {
	t.Helper()
	list := newComputeServer(t, http.StatusOK, "aggregated-instances.json")
	regions := newRegionsServer(t, answers, false)
	pages := &pagesServer{t: t, pages: proxyPages()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == apiPath && isPage(r) {
			pages.serve(w, r)
			return
		}
		if r.URL.Path == apiPath {
			list.serve(w, r)
			return
		}
		regions.serve(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, list, regions
}

// syncBuffer is a log sink the checks may write to concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newQuotaChecker(t *testing.T, endpoint string, regions []string, log *syncBuffer) *Checker {
	t.Helper()
	tokens := newTokenServer(t, nil)
	cfg := &Entry{
		Name: "crawl-prod", Project: testProject, Filter: DefaultFilter, Endpoint: endpoint,
		CredentialsFile:  writeServiceAccount(t, t.TempDir(), tokens.URL+"/token", "exporter@crawl-prod-123.iam.gserviceaccount.com"),
		Regions:          regions,
		MinQuotaHeadroom: testMins,
	}
	c, err := New(cfg, slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestCheckQuotasCalls: a live check with R regions makes 1 + R Compute
// calls; scrapes served from min_interval make none; without regions a
// check is the list call alone and has no facts.
func TestCheckQuotasCalls(t *testing.T) {
	t.Parallel()
	ok := recorded{http.StatusOK, "regions-ok.json"}
	srv, list, regions := quotaAPI(t, map[string]recorded{"us-central1": ok, "europe-west4": ok})
	c := newQuotaChecker(t, srv.URL, []string{"us-central1", "europe-west4"}, &syncBuffer{})
	e := engine.NewEngine(slog.New(slog.DiscardHandler))
	defer e.Close()
	if err := e.Load([]engine.Entry{{Kind: Name, Name: "cached", Reasons: Reasons(), Timeout: hang, MinInterval: time.Hour,
		Build: func() (provider.Checker, error) { return c, nil }}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		res, err := e.Run(context.Background(), engine.Request{Name: "cached"})
		if err != nil {
			t.Fatal(err)
		}
		if r := res[0].Targets[0]; r.Reason != provider.ReasonReady {
			t.Fatalf("scrape %d: %s (%s)", i, r.Reason, r.Message)
		}
	}
	calls := func() (int64, map[string]int) { return list.requests.Load(), regions.counts() }
	if l, r := calls(); l != 1 || r["us-central1"] != 1 || r["europe-west4"] != 1 {
		t.Errorf("3 scrapes within min_interval: %d list calls, regions %v; want 1 + 1 per region", l, r)
	}
	v := check(t, c, hang)
	if l, r := calls(); v.Reason != provider.ReasonReady || l != 2 || r["us-central1"] != 2 || r["europe-west4"] != 2 {
		t.Errorf("one more live check: %s, %d list calls, regions %v; want 2 + 2 per region", v.Reason, l, r)
	}
	want := `
# HELP provider_health_gcp_quota_limit A region's Compute quota limit of a metric named in min_quota_headroom.
# TYPE provider_health_gcp_quota_limit gauge
provider_health_gcp_quota_limit{metric="CPUS",name="crawl-prod",region="europe-west4"} 24
provider_health_gcp_quota_limit{metric="CPUS",name="crawl-prod",region="us-central1"} 24
provider_health_gcp_quota_limit{metric="INSTANCES",name="crawl-prod",region="europe-west4"} 24
provider_health_gcp_quota_limit{metric="INSTANCES",name="crawl-prod",region="us-central1"} 24
provider_health_gcp_quota_limit{metric="IN_USE_ADDRESSES",name="crawl-prod",region="europe-west4"} 8
provider_health_gcp_quota_limit{metric="IN_USE_ADDRESSES",name="crawl-prod",region="us-central1"} 8
# HELP provider_health_gcp_quota_usage A region's Compute quota usage of a metric named in min_quota_headroom.
# TYPE provider_health_gcp_quota_usage gauge
provider_health_gcp_quota_usage{metric="CPUS",name="crawl-prod",region="europe-west4"} 6
provider_health_gcp_quota_usage{metric="CPUS",name="crawl-prod",region="us-central1"} 6
provider_health_gcp_quota_usage{metric="INSTANCES",name="crawl-prod",region="europe-west4"} 3
provider_health_gcp_quota_usage{metric="INSTANCES",name="crawl-prod",region="us-central1"} 3
provider_health_gcp_quota_usage{metric="IN_USE_ADDRESSES",name="crawl-prod",region="europe-west4"} 3
provider_health_gcp_quota_usage{metric="IN_USE_ADDRESSES",name="crawl-prod",region="us-central1"} 3
`
	if err := testutil.CollectAndCompare(factsCollector{v.Facts}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if d := v.Facts.Details(); d["quota us-central1 CPUS"] != "6 of 24" {
		t.Errorf("details %v", d)
	}

	plain := newTestChecker(t, srv.URL, newTokenServer(t, nil))
	before := regions.counts()
	if v := check(t, plain, hang); v.Reason != provider.ReasonReady || v.Facts != nil || len(regions.counts()) != len(before) ||
		regions.counts()["us-central1"] != before["us-central1"] {
		t.Errorf("no regions: %s, facts %v, regions %v after %v; want Ready, no facts, no regions.get", v.Reason, v.Facts, regions.counts(), before)
	}
}

// TestCheckQuotasVerdicts: a quota short of its minimum is QuotaExhausted;
// a region without quota data is not judged, its series are absent, and
// that is logged once, not at every check.
func TestCheckQuotasVerdicts(t *testing.T) {
	t.Parallel()
	srv, _, _ := quotaAPI(t, map[string]recorded{"us-central1": {http.StatusOK, "regions-ok.json"},
		"europe-west4": {http.StatusOK, "regions-exhausted.json"}, "asia-east1": {http.StatusOK, "regions-quota-warning.json"}})
	v := check(t, newQuotaChecker(t, srv.URL, []string{"us-central1", "europe-west4"}, &syncBuffer{}), hang)
	if v.Reason != ReasonQuotaExhausted || !strings.Contains(v.Message, "region europe-west4: quota IN_USE_ADDRESSES usage 8 of limit 8") {
		t.Errorf("exhausted: %s %q", v.Reason, v.Message)
	}
	log := &syncBuffer{}
	c := newQuotaChecker(t, srv.URL, []string{"us-central1", "asia-east1"}, log)
	for range 3 {
		v = check(t, c, hang)
	}
	if v.Reason != provider.ReasonReady || !strings.Contains(v.Message, "no quota data for region asia-east1") {
		t.Errorf("quota warning: %s %q, want Ready naming the region", v.Reason, v.Message)
	}
	if n := strings.Count(log.String(), "regions without quota data"); n != 1 {
		t.Errorf("logged %d times in 3 checks, want once:\n%s", n, log)
	}
	if n := testutil.CollectAndCount(factsCollector{v.Facts}, "provider_health_gcp_quota_limit"); n != 3 {
		t.Errorf("%d quota_limit series, want us-central1's 3 only", n)
	}
}

// factsCollector emits one entry's facts, as the framework does.
type factsCollector struct{ f provider.Facts }

func (c factsCollector) Describe(chan<- *prometheus.Desc) {}
func (c factsCollector) Collect(ch chan<- prometheus.Metric) {
	c.f.Collect(ch, "crawl-prod", TargetName)
}

package gcp

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/egress-proxies/provider_health_exporter/internal/boundedfile"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// regionsServer is a loopback Compute API that answers regions.get with a
// recorded body per region, applies the field mask as Compute does, and
// counts the requests per region. With barrier set, no answer is sent
// before every region's request has arrived: a fetch that asked one region
// after another would never get one.
type regionsServer struct {
	*httptest.Server
	t       *testing.T
	answers map[string]recorded // region -> answer
	barrier bool

	mu       sync.Mutex
	requests map[string]int
	arrived  chan struct{} // closed when every region has been asked
}

type recorded struct {
	status int
	file   string
}

func newRegionsServer(t *testing.T, answers map[string]recorded, barrier bool) *regionsServer {
	t.Helper()
	rs := &regionsServer{t: t, answers: answers, barrier: barrier, requests: map[string]int{}, arrived: make(chan struct{})}
	rs.Server = httptest.NewServer(http.HandlerFunc(rs.serve))
	t.Cleanup(rs.Close)
	return rs
}

func (rs *regionsServer) serve(w http.ResponseWriter, r *http.Request) {
	prefix := "/compute/v1/projects/" + testProject + "/regions/"
	region, ok := strings.CutPrefix(r.URL.Path, prefix)
	answer, known := rs.answers[region]
	if r.Method != http.MethodGet || !ok || !known || len(r.URL.Query()) != 0 {
		rs.t.Errorf("request %s %s, want GET %s<a configured region> with no query", r.Method, r.URL, prefix)
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	if got := r.Header.Get(fieldMaskHeader); got != quotaFieldMask {
		rs.t.Errorf("%s %q, want %q", fieldMaskHeader, got, quotaFieldMask)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+testToken {
		rs.t.Errorf("Authorization %q", got)
	}
	if v := r.Header.Get(checkIDHeader); v != "" {
		rs.t.Errorf("internal header %s leaked to the server: %q", checkIDHeader, v)
	}
	rs.mu.Lock()
	rs.requests[region]++
	if len(rs.requests) == len(rs.answers) {
		select {
		case <-rs.arrived:
		default:
			close(rs.arrived)
		}
	}
	rs.mu.Unlock()
	if rs.barrier {
		select {
		case <-rs.arrived:
		case <-r.Context().Done():
			return
		}
	}
	body := readTestdata(rs.t, answer.file)
	if answer.status == http.StatusOK {
		body = applyFieldMask(rs.t, body, r.Header.Get(fieldMaskHeader))
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(answer.status)
	w.Write(body)
}

// applyFieldMask keeps the top-level fields a mask names, as Compute does
// with a mask of top-level fields.
func applyFieldMask(t *testing.T, body []byte, mask string) []byte {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(body, &all); err != nil {
		t.Fatal(err)
	}
	kept := map[string]json.RawMessage{}
	for _, f := range strings.Split(mask, ",") {
		if v, ok := all[f]; ok {
			kept[f] = v
		}
	}
	b, err := json.Marshal(kept)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (rs *regionsServer) counts() map[string]int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := map[string]int{}
	for k, v := range rs.requests {
		out[k] = v
	}
	return out
}

// regionsClient builds the checker's regions client from its credentials
// file, as a check would.
func regionsClient(t *testing.T, c *Checker) *compute.RegionsClient {
	t.Helper()
	data, err := boundedfile.Read(c.credentialsFile, boundedfile.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	client, err := c.newRegionsClient(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

var testMins = map[string]float64{"CPUS": 8, "INSTANCES": 1, "IN_USE_ADDRESSES": 1}

func testMetrics() []string { return []string{"CPUS", "INSTANCES", "IN_USE_ADDRESSES"} }

// TestRegionQuotas drives the real Regions client against the recorded
// bodies: one request per configured region, all in flight at once, and
// the verdict of each recorded answer.
func TestRegionQuotas(t *testing.T) {
	t.Parallel()
	ok := recorded{http.StatusOK, "regions-ok.json"}
	for _, tc := range []struct {
		name    string
		answers map[string]recorded
		want    provider.Reason
		message string // substring; "" = empty message
	}{
		{"quota OK in every region", map[string]recorded{"us-central1": ok, "us-east1": ok}, provider.ReasonReady, ""},
		{"one metric exhausted", map[string]recorded{"us-central1": ok, "europe-west4": {http.StatusOK, "regions-exhausted.json"}},
			ReasonQuotaExhausted, "region europe-west4: quota IN_USE_ADDRESSES usage 8 of limit 8 leaves 0, 1 required"},
		{"quota status warning is not exhaustion", map[string]recorded{"us-central1": ok, "asia-east1": {http.StatusOK, "regions-quota-warning.json"}},
			provider.ReasonReady, "Compute has no quota data for region asia-east1: QUOTA_INFO_UNAVAILABLE: Quota information is temporarily unavailable"},
		{"region that does not exist", map[string]recorded{"us-central1": ok, "us-nowhere1": {http.StatusNotFound, "regions-404-not-found.json"}},
			provider.ReasonNotFound, "regions/us-nowhere1' was not found"},
		{"permission denied", map[string]recorded{"us-central1": {http.StatusForbidden, "regions-403-forbidden.json"}},
			provider.ReasonForbidden, "compute.regions.get"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tokens := newTokenServer(t, nil)
			api := newRegionsServer(t, tc.answers, true)
			c := newTestChecker(t, api.URL, tokens)
			client := regionsClient(t, c)
			var regions []string
			for r := range tc.answers {
				regions = append(regions, r)
			}
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			defer cancel()
			logger := slog.New(slog.DiscardHandler)
			got, err := c.fetchRegionQuotas(ctx, logger, client, regions, testMetrics())
			reason, msg := provider.Reason(""), ""
			if err != nil {
				v := verdict(ctx, logger, err)
				reason, msg = v.Reason, v.Message
			} else {
				reason, msg = evaluateQuotas(got, testMins)
			}
			if reason != tc.want || (tc.message == "") != (msg == "") || !strings.Contains(msg, tc.message) {
				t.Errorf("got %s %q, want %s with %q", reason, msg, tc.want, tc.message)
			}
			for _, r := range regions {
				if n := api.counts()[r]; n != 1 {
					t.Errorf("region %s asked %d times, want 1 (all: %v)", r, n, api.counts())
				}
			}
		})
	}
}

// TestRegionQuotaValues: the configured metrics of a recorded answer, and
// nothing else, are what the series will be made of.
func TestRegionQuotaValues(t *testing.T) {
	t.Parallel()
	tokens := newTokenServer(t, nil)
	api := newRegionsServer(t, map[string]recorded{"us-central1": {http.StatusOK, "regions-ok.json"}}, false)
	c := newTestChecker(t, api.URL, tokens)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	got, err := c.fetchRegionQuotas(ctx, slog.New(slog.DiscardHandler), regionsClient(t, c), []string{"us-central1"}, testMetrics())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Quota{"CPUS": {6, 24}, "INSTANCES": {3, 24}, "IN_USE_ADDRESSES": {3, 8}}
	if len(got) != 1 || got[0].Region != "us-central1" || got[0].NoData != "" || len(got[0].Quotas) != len(want) {
		t.Fatalf("got %+v, want us-central1 with %v", got, want)
	}
	for m, q := range want {
		if got[0].Quotas[m] != q {
			t.Errorf("%s = %+v, want %+v", m, got[0].Quotas[m], q)
		}
	}
}

func TestEvaluateQuotas(t *testing.T) {
	full := func(region string, cpus Quota) RegionQuota {
		return RegionQuota{Region: region, Quotas: map[string]Quota{"CPUS": cpus, "INSTANCES": {3, 24}, "IN_USE_ADDRESSES": {3, 8}}}
	}
	for _, tc := range []struct {
		name    string
		regions []RegionQuota
		want    provider.Reason
		message string
	}{
		{"nothing configured", nil, provider.ReasonReady, ""},
		{"exactly the minimum left", []RegionQuota{full("us-central1", Quota{16, 24})}, provider.ReasonReady, ""},
		{"one below the minimum", []RegionQuota{full("us-central1", Quota{17, 24})}, ReasonQuotaExhausted,
			"region us-central1: quota CPUS usage 17 of limit 24 leaves 7, 8 required"},
		{"over the limit", []RegionQuota{full("us-central1", Quota{30, 24})}, ReasonQuotaExhausted,
			"region us-central1: quota CPUS usage 30 of limit 24 leaves 0, 8 required"},
		{"every short quota named, in region order", []RegionQuota{full("us-east1", Quota{24, 24}), full("us-central1", Quota{0.5, 8})},
			ReasonQuotaExhausted, "region us-east1: quota CPUS usage 24 of limit 24 leaves 0, 8 required; " +
				"region us-central1: quota CPUS usage 0.5 of limit 8 leaves 7.5, 8 required"},
		{"no data is not exhaustion", []RegionQuota{full("us-central1", Quota{0, 24}), {Region: "asia-east1", NoData: "no data for asia-east1"}},
			provider.ReasonReady, "no data for asia-east1"},
		{"exhaustion elsewhere wins over no data", []RegionQuota{{Region: "asia-east1", NoData: "no data"}, full("us-central1", Quota{24, 24})},
			ReasonQuotaExhausted, "region us-central1: quota CPUS usage 24 of limit 24 leaves 0, 8 required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg := evaluateQuotas(tc.regions, testMins)
			if reason != tc.want || msg != tc.message {
				t.Errorf("got %s %q, want %s %q", reason, msg, tc.want, tc.message)
			}
		})
	}
}

func TestMissingMetricIsNoData(t *testing.T) {
	rq := regionQuota("europe-west4", regionFromFile(t, "regions-exhausted.json"), []string{"CPUS", "GPUS_ALL_REGIONS", "SSD_TOTAL_GB"})
	if rq.Quotas != nil || rq.NoData != "Compute lists no quota GPUS_ALL_REGIONS, SSD_TOTAL_GB for region europe-west4" {
		t.Errorf("got %+v", rq)
	}
	if reason, _ := evaluateQuotas([]RegionQuota{rq}, map[string]float64{"CPUS": 100}); reason != provider.ReasonReady {
		t.Errorf("a region without data gave %s", reason)
	}
}

func regionFromFile(t *testing.T, name string) *computepb.Region {
	t.Helper()
	r := &computepb.Region{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(readTestdata(t, name), r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRegionQuotasDeadline: a region that never answers ends the fetch at
// the check's deadline with Timeout, however long the server would wait;
// the requests of the other regions are bounded by the same context.
func TestRegionQuotasDeadline(t *testing.T) {
	t.Parallel()
	tokens := newTokenServer(t, nil)
	// The barrier never opens: "us-nowhere1" is configured in the server
	// but not asked for, so every request waits for its context.
	api := newRegionsServer(t, map[string]recorded{
		"us-central1": {http.StatusOK, "regions-ok.json"}, "us-east1": {http.StatusOK, "regions-ok.json"},
		"us-nowhere1": {http.StatusNotFound, "regions-404-not-found.json"},
	}, true)
	c := newTestChecker(t, api.URL, tokens)
	client := regionsClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	_, err := c.fetchRegionQuotas(ctx, logger, client, []string{"us-central1", "us-east1"}, testMetrics())
	if err == nil {
		t.Fatal("fetch returned without an answer")
	}
	if v := verdict(ctx, logger, err); v.Reason != provider.ReasonTimeout {
		t.Errorf("got %s %q, want Timeout", v.Reason, v.Message)
	}
}

// TestUnusableNumbers: a NaN, infinite or negative usage or limit is no
// usable quota data for that metric: not judged (never Ready by a NaN
// comparison, never exhausted by a negative limit), its series absent, the
// message and details saying why; the region's other metrics are judged.
func TestUnusableNumbers(t *testing.T) {
	t.Parallel()
	rq := regionQuota("us-west1", regionFromFile(t, "regions-unusable-numbers.json"), []string{"CPUS", "DISKS_TOTAL_GB", "INSTANCES", "IN_USE_ADDRESSES"})
	if rq.NoData != "" || len(rq.Quotas) != 1 || rq.Quotas["DISKS_TOTAL_GB"] != (Quota{120, 4096}) {
		t.Errorf("usable quotas %v (no data %q), want DISKS_TOTAL_GB alone", rq.Quotas, rq.NoData)
	}
	for m, why := range map[string]string{"CPUS": "usage NaN", "IN_USE_ADDRESSES": "limit +Inf", "INSTANCES": "limit -1"} {
		want := "Compute's quota " + m + " for region us-west1 has " + why + ", not a number a quota can have: not judged"
		if rq.Unusable[m] != want {
			t.Errorf("%s: %q, want %q", m, rq.Unusable[m], want)
		}
	}
	// Minimums every one of them would fail if read as numbers.
	mins := map[string]float64{"CPUS": 1e9, "INSTANCES": 1, "IN_USE_ADDRESSES": 1e9}
	reason, msg := evaluateQuotas([]RegionQuota{rq}, mins)
	if reason != provider.ReasonReady || !strings.Contains(msg, "CPUS for region us-west1 has usage NaN") ||
		!strings.Contains(msg, "INSTANCES for region us-west1 has limit -1") || !strings.Contains(msg, "IN_USE_ADDRESSES for region us-west1 has limit +Inf") {
		t.Errorf("got %s %q, want Ready naming each unusable metric", reason, msg)
	}
	// The usable metric of the same region is still judged.
	if reason, _ := evaluateQuotas([]RegionQuota{rq}, map[string]float64{"CPUS": 1, "DISKS_TOTAL_GB": 4000}); reason != ReasonQuotaExhausted {
		t.Errorf("DISKS_TOTAL_GB short by 24: %s, want QuotaExhausted", reason)
	}
	f := &Facts{Regions: []RegionQuota{rq}, metrics: []string{"CPUS", "DISKS_TOTAL_GB", "INSTANCES", "IN_USE_ADDRESSES"}}
	want := `
# HELP provider_health_gcp_quota_limit A region's Compute quota limit of a metric named in min_quota_headroom.
# TYPE provider_health_gcp_quota_limit gauge
provider_health_gcp_quota_limit{metric="DISKS_TOTAL_GB",name="crawl-prod",region="us-west1"} 4096
# HELP provider_health_gcp_quota_usage A region's Compute quota usage of a metric named in min_quota_headroom.
# TYPE provider_health_gcp_quota_usage gauge
provider_health_gcp_quota_usage{metric="DISKS_TOTAL_GB",name="crawl-prod",region="us-west1"} 120
`
	if err := testutil.CollectAndCompare(factsCollector{f}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if d := f.Details(); !strings.Contains(d["quota us-west1 CPUS"], "usage NaN") || d["quota us-west1 DISKS_TOTAL_GB"] != "120 of 4096" {
		t.Errorf("details %v", d)
	}
	for _, tc := range []struct {
		q    Quota
		want string
	}{
		{Quota{Usage: math.Inf(-1), Limit: 8}, "usage -Inf"},
		{Quota{Usage: -3, Limit: 8}, "usage -3"},
		{Quota{Usage: 1, Limit: math.NaN()}, "limit NaN"},
		{Quota{Usage: 0, Limit: 0}, ""},
	} {
		if got := unusable(tc.q); got != tc.want {
			t.Errorf("unusable(%+v) = %q, want %q", tc.q, got, tc.want)
		}
	}
}

// TestDuplicateMetric: a metric Compute lists twice is judged by the
// listing with the least headroom, whichever comes last, and exported once.
func TestDuplicateMetric(t *testing.T) {
	t.Parallel()
	rq := regionQuota("us-west2", regionFromFile(t, "regions-duplicate-metric.json"), testMetrics())
	if rq.Quotas["CPUS"] != (Quota{24, 24}) {
		t.Errorf("CPUS %+v, want the exhausted listing 24 of 24", rq.Quotas["CPUS"])
	}
	reason, msg := evaluateQuotas([]RegionQuota{rq}, testMins)
	if reason != ReasonQuotaExhausted || msg != "region us-west2: quota CPUS usage 24 of limit 24 leaves 0, 8 required" {
		t.Errorf("got %s %q", reason, msg)
	}
	f := &Facts{Regions: []RegionQuota{rq}, metrics: testMetrics()}
	if n := testutil.CollectAndCount(factsCollector{f}, "provider_health_gcp_quota_usage"); n != 3 {
		t.Errorf("%d usage series, want one per metric", n)
	}
	// A NaN listing beside a usable one: the usable one is judged.
	q, why := leastHeadroom([]Quota{{Usage: math.NaN(), Limit: 24}, {Usage: 20, Limit: 24}})
	if why != "" || q != (Quota{20, 24}) {
		t.Errorf("got %+v %q, want the usable listing", q, why)
	}
}

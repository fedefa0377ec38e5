package gcp

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// pagesServer answers the paging of the proxies' count: the aggregated
// instance list with maxResults=500, the filter and the field mask, one
// recorded page per pageToken ("" the first). A page without an answer is
// a test failure.
type pagesServer struct {
	t     *testing.T
	pages map[string]recorded // pageToken -> answer

	mu    sync.Mutex
	asked []string // the pageTokens asked, in order
}

// proxyPages are the two recorded pages of the count: us-central1 4
// (2 in -a, 1 in -b, 1 in -f), europe-west4 3 (-b), us-east4 1 (-c),
// asia-east1 1.
func proxyPages() map[string]recorded {
	return map[string]recorded{
		"": {http.StatusOK, "aggregated-proxies-page1.json"},
		"ClgKVnpvbmVzL3VzLWVhc3Q0LWMvaW5zdGFuY2VzL2VncmVzcy1wcm94eS1lNGMwbg==": {http.StatusOK, "aggregated-proxies-page2.json"},
	}
}

// isPage tells a paging request of the count from the check's one list call.
func isPage(r *http.Request) bool { return r.URL.Query().Get("maxResults") != "1" }

func (ps *pagesServer) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	token := q.Get("pageToken")
	answer, ok := ps.pages[token]
	params := 2
	if token != "" {
		params = 3
	}
	if r.Method != http.MethodGet || r.URL.Path != apiPath || !ok || q.Get("maxResults") != "500" || q.Get("filter") != DefaultFilter || len(q) != params {
		ps.t.Errorf("request %s %s, want GET %s with maxResults=500, the filter and a known pageToken", r.Method, r.URL, apiPath)
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	if got := r.Header.Get(fieldMaskHeader); got != instancesFieldMask {
		ps.t.Errorf("%s %q, want %q", fieldMaskHeader, got, instancesFieldMask)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+testToken {
		ps.t.Errorf("Authorization %q", got)
	}
	ps.mu.Lock()
	ps.asked = append(ps.asked, token)
	ps.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(answer.status)
	w.Write(readTestdata(ps.t, answer.file))
}

func (ps *pagesServer) tokens() []string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return slices.Clone(ps.asked)
}

// TestRegionDomains: an entry with regions exports one domain per region,
// in configured order: its capacity floor((limit − usage) / need) least
// over the metrics (a DOWN region 0), the proxies the filter matches in
// its zones over every page, and its after-loss, the other regions'
// capacities summed less its proxies. The arithmetic is written out per
// case from the recorded bodies:
//
//	regions-ok.json (us-central1):      CPUS 6 of 24, INSTANCES 3 of 24, IN_USE_ADDRESSES 3 of 8
//	regions-roomy.json (europe-west4):  CPUS 10 of 96, INSTANCES 12 of 100, IN_USE_ADDRESSES 12 of 32
//	regions-down.json (us-east4):       DOWN
//	pages: us-central1 2+1+1 = 4, europe-west4 3, us-east4 1 (asia-east1's 1 is no configured region's)
func TestRegionDomains(t *testing.T) {
	t.Parallel()
	answers := map[string]recorded{
		"us-central1": {http.StatusOK, "regions-ok.json"}, "europe-west4": {http.StatusOK, "regions-roomy.json"},
		"us-east4": {http.StatusOK, "regions-down.json"}, "asia-east1": {http.StatusOK, "regions-quota-warning.json"},
	}
	loopPage := map[string]recorded{"": {http.StatusOK, "aggregated-instances.json"},
		"ClgKVnpvbmVzL3VzLWNlbnRyYWwxLWEvaW5zdGFuY2VzL2VncmVzcy1wcm94eS03ZjljMg==": {http.StatusOK, "aggregated-instances.json"}}
	d := func(name string, capacity, proxies, afterLoss int64) provider.Domain {
		return provider.Domain{Name: name, Capacity: capacity, Proxies: proxies, AfterLoss: afterLoss, HasAfterLoss: true}
	}
	for _, tc := range []struct {
		name    string
		regions []string
		mins    map[string]float64
		image   bool // an obsolete source_image
		pages   map[string]recorded
		want    provider.Reason
		domains []provider.Domain
		asked   []string // the pageTokens asked
		message string   // in the message
	}{
		{
			// us-central1: min(18/8 = 2, 21/1, 5/1) = 2; europe-west4: min(86/8 = 10, 88/1, 20/1) = 10.
			// Losing us-central1: 10 − 4 = 6; losing europe-west4: 2 − 3 = −1.
			name: "two regions, one loss leaves proxies without a place", regions: []string{"us-central1", "europe-west4"},
			mins: testMins, want: provider.ReasonReady,
			domains: []provider.Domain{d("us-central1", 2, 4, 6), d("europe-west4", 10, 3, -1)},
			asked:   []string{"", "ClgKVnpvbmVzL3VzLWVhc3Q0LWMvaW5zdGFuY2VzL2VncmVzcy1wcm94eS1lNGMwbg=="}, message: "losing europe-west4 leaves 1 proxy without a place",
		},
		{
			// CPUS 2: us-central1 min(18/2 = 9, 21, 5) = 5; europe-west4 min(86/2 = 43, 88, 20) = 20; us-east4 DOWN 0.
			// Sum 25. Losing us-central1: 25 − 5 − 4 = 16; europe-west4: 25 − 20 − 3 = 2; us-east4: 25 − 0 − 1 = 24.
			name: "a down region counts 0 and its proxies move", regions: []string{"us-central1", "europe-west4", "us-east4"},
			mins: map[string]float64{"CPUS": 2, "INSTANCES": 1, "IN_USE_ADDRESSES": 1}, want: ReasonRegionDown,
			domains: []provider.Domain{d("us-central1", 5, 4, 16), d("europe-west4", 20, 3, 2), d("us-east4", 0, 1, 24)},
			asked:   []string{"", "ClgKVnpvbmVzL3VzLWVhc3Q0LWMvaW5zdGFuY2VzL2VncmVzcy1wcm94eS1lNGMwbg=="}, message: "us-east4 DOWN",
		},
		{
			// An obsolete image fits none anywhere: capacities 0, so losing
			// us-central1 leaves 0 − 4, europe-west4 0 − 3.
			name: "an unavailable image fits none in any region", regions: []string{"us-central1", "europe-west4"},
			mins: testMins, image: true, want: ReasonImageUnavailable,
			domains: []provider.Domain{d("us-central1", 0, 4, -4), d("europe-west4", 0, 3, -3)},
			asked:   []string{"", "ClgKVnpvbmVzL3VzLWVhc3Q0LWMvaW5zdGFuY2VzL2VncmVzcy1wcm94eS1lNGMwbg=="}, message: "is OBSOLETE",
		},
		{
			name: "a region without quota data: no domains, no paging", regions: []string{"us-central1", "asia-east1"},
			mins: testMins, want: provider.ReasonReady, message: "no domain series: region asia-east1 has no known capacity",
		},
		{
			name: "past the page bound: no domains", regions: []string{"us-central1", "europe-west4"}, mins: testMins, pages: loopPage,
			want: provider.ReasonReady, message: "no domain series: more than 20 pages of 500 instances",
			asked: append([]string{""}, slices.Repeat([]string{"ClgKVnpvbmVzL3VzLWNlbnRyYWwxLWEvaW5zdGFuY2VzL2VncmVzcy1wcm94eS03ZjljMg=="}, 19)...),
		},
		{
			name: "a page that fails is the check's failure", regions: []string{"us-central1", "europe-west4"}, mins: testMins,
			pages: map[string]recorded{"": {http.StatusOK, "aggregated-proxies-page1.json"},
				"ClgKVnpvbmVzL3VzLWVhc3Q0LWMvaW5zdGFuY2VzL2VncmVzcy1wcm94eS1lNGMwbg==": {http.StatusInternalServerError, "error-500-backend.json"}},
			want:  provider.ReasonServerError,
			asked: []string{"", "ClgKVnpvbmVzL3VzLWVhc3Q0LWMvaW5zdGFuY2VzL2VncmVzcy1wcm94eS1lNGMwbg=="}, message: "backendError",
		},
		{
			name: "a page of another kind is a bad response", regions: []string{"us-central1", "europe-west4"}, mins: testMins,
			pages: map[string]recorded{"": {http.StatusOK, "aggregated-proxies-page1.json"},
				"ClgKVnpvbmVzL3VzLWVhc3Q0LWMvaW5zdGFuY2VzL2VncmVzcy1wcm94eS1lNGMwbg==": {http.StatusOK, "bad-200-other-kind.json"}},
			want:  provider.ReasonBadResponse,
			asked: []string{"", "ClgKVnpvbmVzL3VzLWVhc3Q0LWMvaW5zdGFuY2VzL2VncmVzcy1wcm94eS1lNGMwbg=="}, message: `page 2 has kind "compute#project"`,
		},
		{
			name: "no regions: no domains, no paging", want: provider.ReasonReady, message: "Compute answered",
		},
		{
			// Losing the only region leaves nowhere to go: no domains.
			name: "one region: no domains, no paging", regions: []string{"us-central1"}, mins: testMins,
			want: provider.ReasonReady, message: "Compute answered",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newPlacementAPI(t, http.StatusOK, "aggregated-instances.json", answers,
				map[string]recorded{debianImage: {http.StatusOK, "images-obsolete.json"}})
			if tc.pages != nil {
				api.pages.pages = tc.pages
			}
			c, _ := newPlacementChecker(t, api.URL, nil, func(g *Entry) {
				g.Regions, g.MinQuotaHeadroom = tc.regions, tc.mins
				if tc.image {
					g.SourceImage = debianImage
				}
			})
			v := check(t, c, hang)
			if v.Reason != tc.want || !slices.Equal(v.Domains, tc.domains) || !strings.Contains(v.Message, tc.message) {
				t.Errorf("got %s, domains %+v, %q\nwant %s, domains %+v, a message with %q", v.Reason, v.Domains, v.Message, tc.want, tc.domains, tc.message)
			}
			if got := api.pages.tokens(); !slices.Equal(got, tc.asked) {
				t.Errorf("pages asked %q, want %q", got, tc.asked)
			}
		})
	}
}

func TestZoneRegion(t *testing.T) {
	t.Parallel()
	for scope, want := range map[string]string{
		"zones/us-central1-a": "us-central1", "zones/europe-west4-b": "europe-west4", "zones/me-central2-c": "me-central2",
		"regions/us-central1": "", "zones/": "", "zones/-a": "", "global": "", "us-central1-a": "",
	} {
		got, ok := zoneRegion(scope)
		if got != want || ok != (want != "") {
			t.Errorf("zoneRegion(%q) = %q, %v; want %q", scope, got, ok, want)
		}
	}
}

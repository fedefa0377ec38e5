package gcp

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// imagesServer is a loopback Compute answering images.get and
// images.getFromFamily with a recorded body per path (below
// /compute/v1/), applying the field mask as Compute does.
type imagesServer struct {
	t       *testing.T
	answers map[string]recorded // "projects/P/global/images/..." -> answer

	mu       sync.Mutex
	requests []string
}

func (is *imagesServer) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/compute/v1/")
	answer, ok := is.answers[path]
	if r.Method != http.MethodGet || !ok || len(r.URL.Query()) != 0 {
		is.t.Errorf("request %s %s, want GET of a configured image with no query", r.Method, r.URL)
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	if got := r.Header.Get(fieldMaskHeader); got != imageFieldMask {
		is.t.Errorf("%s %q, want %q", fieldMaskHeader, got, imageFieldMask)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+testToken {
		is.t.Errorf("Authorization %q", got)
	}
	is.mu.Lock()
	is.requests = append(is.requests, path)
	is.mu.Unlock()
	body := readTestdata(is.t, answer.file)
	if answer.status == http.StatusOK && json.Valid(body) {
		body = applyFieldMask(is.t, body, imageFieldMask)
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(answer.status)
	w.Write(body)
}

func (is *imagesServer) asked() []string {
	is.mu.Lock()
	defer is.mu.Unlock()
	return slices.Clone(is.requests)
}

// placementAPI is one loopback Compute answering the list call, regions.get
// and the images calls at the same endpoint.
type placementAPI struct {
	*httptest.Server
	list    *computeServer
	pages   *pagesServer
	regions *regionsServer
	images  *imagesServer
}

func newPlacementAPI(t *testing.T, listStatus int, listFile string, regions, images map[string]recorded) *placementAPI {
	t.Helper()
	api := &placementAPI{
		list:    newComputeServer(t, listStatus, listFile),
		regions: newRegionsServer(t, regions, false),
		images:  &imagesServer{t: t, answers: images},
		pages:   &pagesServer{t: t, pages: proxyPages()},
	}
	api.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == apiPath && isPage(r):
			api.pages.serve(w, r)
		case r.URL.Path == apiPath:
			api.list.serve(w, r)
		case strings.Contains(r.URL.Path, "/global/images/"):
			api.images.serve(w, r)
		default:
			api.regions.serve(w, r)
		}
	}))
	t.Cleanup(api.Close)
	return api
}

// newPlacementChecker is a checker of endpoint with the entry's keys set by
// configure (Regions, MinQuotaHeadroom, SourceImage), validated as the
// loader does.
func newPlacementChecker(t *testing.T, endpoint string, log *syncBuffer, configure func(*Entry)) (*Checker, provider.ReasonSet) {
	t.Helper()
	tokens := newTokenServer(t, nil)
	cfg := &Entry{
		Name: "crawl-prod", Project: testProject, Filter: DefaultFilter, Endpoint: endpoint,
		CredentialsFile: writeServiceAccount(t, t.TempDir(), tokens.URL+"/token", "exporter@crawl-prod-123.iam.gserviceaccount.com"),
	}
	configure(cfg)
	if err := cfg.Validate("gcp[0]"); err != nil {
		t.Fatal(err)
	}
	if log == nil {
		log = &syncBuffer{}
	}
	c, err := New(cfg, slogText(log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, EntryReasons(cfg)
}

const (
	debianImage  = "projects/debian-cloud/global/images/debian-12-bookworm-v20240110"
	debianFamily = "projects/debian-cloud/global/images/family/debian-12"
	replacedBy   = "https://www.googleapis.com/compute/v1/projects/debian-cloud/global/images/debian-12-bookworm-v20240213"
)

// TestRegionDown: a configured region Compute reports DOWN gives
// RegionDown naming it, from the same regions.get (status is in the field
// mask: no extra call), and wins over an exhausted quota elsewhere.
func TestRegionDown(t *testing.T) {
	t.Parallel()
	api := newPlacementAPI(t, http.StatusOK, "aggregated-instances.json", map[string]recorded{
		"us-central1": {http.StatusOK, "regions-ok.json"}, "us-east4": {http.StatusOK, "regions-down.json"},
		"europe-west4": {http.StatusOK, "regions-exhausted.json"},
	}, nil)
	c, reasons := newPlacementChecker(t, api.URL, nil, func(g *Entry) {
		g.Regions, g.MinQuotaHeadroom = []string{"us-central1", "europe-west4", "us-east4"}, testMins
	})
	v := check(t, c, hang)
	// The regions are the entry's failure domains: the message names the
	// worst loss after the reason (us-central1's 4 proxies, with the two
	// others at 0: one exhausted, one DOWN).
	want := "Compute reports region us-east4 DOWN: no instance can be placed there; losing us-central1 leaves 4 proxies without a place"
	if v.Reason != ReasonRegionDown || v.Message != want {
		t.Errorf("got %s %q, want RegionDown %q", v.Reason, v.Message, want)
	}
	if !reasons.Contains(ReasonRegionDown) || !reasons.Up(ReasonRegionDown) {
		t.Errorf("RegionDown not in the entry's set as up: %v", reasons)
	}
	d := v.Facts.Details()
	if d["region us-east4 status"] != "DOWN" || d["region us-central1 status"] != "UP" {
		t.Errorf("details %v, want each region's status", d)
	}
	// The down region's quotas are still read and exported.
	if n := testutil.CollectAndCount(factsCollector{v.Facts}, "provider_health_gcp_quota_limit"); n != 9 {
		t.Errorf("%d quota_limit series, want 3 regions × 3 metrics", n)
	}
	if l, r := api.list.requests.Load(), api.regions.counts(); l != 1 || len(r) != 3 || r["us-east4"] != 1 {
		t.Errorf("%d list calls, regions %v; want 1 + 1 per region", l, r)
	}

	// Without the down region, the exhausted quota is the verdict.
	c, _ = newPlacementChecker(t, api.URL, nil, func(g *Entry) {
		g.Regions, g.MinQuotaHeadroom = []string{"us-central1", "europe-west4"}, testMins
	})
	if v := check(t, c, hang); v.Reason != ReasonQuotaExhausted {
		t.Errorf("got %s %q, want QuotaExhausted", v.Reason, v.Message)
	}
}

// TestSourceImage drives the real Images client against every recorded
// image answer: one images.get (images.getFromFamily for a family) after
// the list call, and the verdict and details of each.
func TestSourceImage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, image string
		answer      recorded
		want        provider.Reason
		message     string // the whole message
		details     map[string]string
	}{
		{"usable image", debianImage, recorded{http.StatusOK, "images-ok.json"}, provider.ReasonReady,
			"Compute answered: managed instance egress-proxy-7f9c2 in zones/us-central1-a",
			map[string]string{"source_image": debianImage, "source image": "debian-12-bookworm-v20240213", "source image state": "not deprecated"}},
		{"deprecated stays Ready, naming the replacement", debianImage, recorded{http.StatusOK, "images-deprecated.json"}, provider.ReasonReady,
			"Compute answered: managed instance egress-proxy-7f9c2 in zones/us-central1-a; source image " + debianImage + " is DEPRECATED (replacement: " + replacedBy + ")",
			map[string]string{"source image state": "DEPRECATED", "source image replacement": replacedBy}},
		{"obsolete", debianImage, recorded{http.StatusOK, "images-obsolete.json"}, ReasonImageUnavailable,
			"source image " + debianImage + " is OBSOLETE (replacement: " + replacedBy + ")",
			map[string]string{"source image state": "OBSOLETE", "source image": "debian-12-bookworm-v20231010"}},
		{"deleted", debianImage, recorded{http.StatusOK, "images-deleted.json"}, ReasonImageUnavailable,
			"source image " + debianImage + " is DELETED (replacement: " + replacedBy + ")",
			map[string]string{"source image state": "DELETED"}},
		{"not found", "projects/debian-cloud/global/images/debian-9-stretch-v20200309", recorded{http.StatusNotFound, "images-404-not-found.json"}, ReasonImageUnavailable,
			"source image projects/debian-cloud/global/images/debian-9-stretch-v20200309 not found: Compute answered HTTP 404 notFound: " +
				"The resource 'projects/debian-cloud/global/images/debian-9-stretch-v20200309' was not found",
			map[string]string{"source image state": "not found"}},
		{"family", debianFamily, recorded{http.StatusOK, "images-ok.json"}, provider.ReasonReady,
			"Compute answered: managed instance egress-proxy-7f9c2 in zones/us-central1-a",
			map[string]string{"source_image": debianFamily, "source image": "debian-12-bookworm-v20240213"}},
		{"family pointing at a deprecated image", debianFamily, recorded{http.StatusOK, "images-deprecated.json"}, provider.ReasonReady,
			"Compute answered: managed instance egress-proxy-7f9c2 in zones/us-central1-a; source image " + debianFamily +
				" (now debian-12-bookworm-v20240110) is DEPRECATED (replacement: " + replacedBy + ")", nil},
		{"family not found", "projects/debian-cloud/global/images/family/debian-9", recorded{http.StatusNotFound, "images-family-404-not-found.json"},
			ReasonImageUnavailable, "source image projects/debian-cloud/global/images/family/debian-9 not found: Compute answered HTTP 404 notFound: " +
				"The resource 'projects/debian-cloud/global/images/family/debian-9' was not found", nil},
		{"an answer that does not decode", debianImage, recorded{http.StatusOK, "bad-200-truncated.json"}, provider.ReasonBadResponse,
			"Compute answered 200 with a body that is not an image: get source image " + debianImage + ": …", nil},
		{"no permission on the image's project", "projects/proxy-images/global/images/proxy-base", recorded{http.StatusForbidden, "images-403-forbidden.json"},
			provider.ReasonForbidden, "Compute answered HTTP 403 forbidden: Required 'compute.images.get' permission for 'projects/proxy-images/global/images/proxy-base'", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newPlacementAPI(t, http.StatusOK, "aggregated-instances.json", nil, map[string]recorded{tc.image: tc.answer})
			c, reasons := newPlacementChecker(t, api.URL, nil, func(g *Entry) { g.SourceImage = tc.image })
			v := check(t, c, hang)
			if prefix, ok := strings.CutSuffix(tc.message, "…"); ok && v.Reason == tc.want && strings.HasPrefix(v.Message, prefix) {
				// The decoder's own words follow.
			} else if v.Reason != tc.want || v.Message != tc.message {
				t.Errorf("got %s %q\nwant %s %q", v.Reason, v.Message, tc.want, tc.message)
			}
			if !reasons.Contains(v.Reason) {
				t.Errorf("%s is not in the entry's set %v", v.Reason, reasons.Reasons())
			}
			if tc.details != nil {
				if v.Facts == nil {
					t.Fatal("no facts")
				}
				d := v.Facts.Details()
				for k, want := range tc.details {
					if d[k] != want {
						t.Errorf("details[%q] = %q, want %q (all: %v)", k, d[k], want, d)
					}
				}
			}
			if got := api.images.asked(); len(got) != 1 || got[0] != tc.image || api.list.requests.Load() != 1 {
				t.Errorf("images asked %v after %d list calls, want %s once after one", got, api.list.requests.Load(), tc.image)
			}
		})
	}
}

// TestPlacementPrecedence: list > RegionDown > QuotaExhausted >
// ImageUnavailable, and a check asks no more than its verdict needs: no
// regions.get or images call after a failed list, no images call once a
// region reason stands.
func TestPlacementPrecedence(t *testing.T) {
	t.Parallel()
	obsolete := map[string]recorded{debianImage: {http.StatusOK, "images-obsolete.json"}}
	for _, tc := range []struct {
		name           string
		listStatus     int
		listFile       string
		regions        map[string]recorded
		want           provider.Reason
		regionRequests int
		imageRequests  int
	}{
		{"list refused", http.StatusForbidden, "error-403-forbidden.json",
			map[string]recorded{"us-east4": {http.StatusOK, "regions-down.json"}}, provider.ReasonForbidden, 0, 0},
		{"region down", http.StatusOK, "aggregated-instances.json",
			map[string]recorded{"us-east4": {http.StatusOK, "regions-down.json"}, "europe-west4": {http.StatusOK, "regions-exhausted.json"}},
			ReasonRegionDown, 2, 0},
		{"quota exhausted", http.StatusOK, "aggregated-instances.json",
			map[string]recorded{"europe-west4": {http.StatusOK, "regions-exhausted.json"}}, ReasonQuotaExhausted, 1, 0},
		{"regions fine, image obsolete", http.StatusOK, "aggregated-instances.json",
			map[string]recorded{"us-central1": {http.StatusOK, "regions-ok.json"}}, ReasonImageUnavailable, 1, 1},
		{"region unknown", http.StatusOK, "aggregated-instances.json",
			map[string]recorded{"us-nowhere1": {http.StatusNotFound, "regions-404-not-found.json"}}, provider.ReasonNotFound, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newPlacementAPI(t, tc.listStatus, tc.listFile, tc.regions, obsolete)
			var regions []string
			for r := range tc.regions {
				regions = append(regions, r)
			}
			slices.Sort(regions)
			c, _ := newPlacementChecker(t, api.URL, nil, func(g *Entry) {
				g.Regions, g.MinQuotaHeadroom, g.SourceImage = regions, testMins, debianImage
			})
			v := check(t, c, hang)
			if v.Reason != tc.want {
				t.Errorf("got %s %q, want %s", v.Reason, v.Message, tc.want)
			}
			n := 0
			for _, c := range api.regions.counts() {
				n += c
			}
			if n != tc.regionRequests || len(api.images.asked()) != tc.imageRequests {
				t.Errorf("%d regions.get, %d image calls; want %d, %d", n, len(api.images.asked()), tc.regionRequests, tc.imageRequests)
			}
		})
	}
}

// TestEntryReasons: an opt-in check's reasons are in an entry's state set
// only when its key is set, so an entry without the keys exports exactly
// the series it did before they existed.
func TestEntryReasons(t *testing.T) {
	t.Parallel()
	placement := []provider.Reason{ReasonQuotaExhausted, ReasonRegionDown, ReasonImageUnavailable}
	for _, tc := range []struct {
		name string
		cfg  Entry
		want []provider.Reason
	}{
		{"no key", Entry{}, nil},
		{"regions", Entry{Regions: []string{"us-central1"}, MinQuotaHeadroom: testMins}, []provider.Reason{ReasonQuotaExhausted, ReasonRegionDown}},
		{"source_image", Entry{SourceImage: debianFamily}, []provider.Reason{ReasonImageUnavailable}},
		{"both", Entry{Regions: []string{"us-central1"}, MinQuotaHeadroom: testMins, SourceImage: debianFamily}, placement},
	} {
		set := EntryReasons(&tc.cfg)
		var got []provider.Reason
		for _, r := range placement {
			if set.Contains(r) {
				got = append(got, r)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: placement reasons %v, want %v", tc.name, got, tc.want)
		}
		if base := Reasons().Without(placement...); len(set) != len(base)+len(tc.want) {
			t.Errorf("%s: set %v is not the base set plus %v", tc.name, set.Reasons(), tc.want)
		}
	}
	if got := Kind().EntryReasons(&Entry{}); len(got) != len(Reasons())-3 {
		t.Errorf("the kind's entry set without keys has %d reasons, want %d", len(got), len(Reasons())-3)
	}
}

func slogText(w *syncBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

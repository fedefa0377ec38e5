package gcp

import (
	"net/http"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestQuotaCapacity: the capacity of an entry with regions is the least
// over its regions and metrics of floor((limit − usage) / need) from the
// recorded regions.get bodies, a DOWN region counting 0, a region or
// metric without usable quota data counting for nothing; it is 0 exactly
// when the verdict is not Ready.
func TestQuotaCapacity(t *testing.T) {
	t.Parallel()
	ok := recorded{http.StatusOK, "regions-ok.json"} // CPUS 6 of 24, INSTANCES 3 of 24, IN_USE_ADDRESSES 3 of 8
	answers := map[string]recorded{
		"us-central1": ok, "europe-west4": {http.StatusOK, "regions-exhausted.json"},
		"us-east4": {http.StatusOK, "regions-down.json"}, "asia-east1": {http.StatusOK, "regions-quota-warning.json"},
		"us-west1": {http.StatusOK, "regions-unusable-numbers.json"}, "us-west2": {http.StatusOK, "regions-duplicate-metric.json"},
	}
	known := func(n int64, binding string) provider.Capacity {
		return provider.Capacity{Known: true, Proxies: n, Binding: binding}
	}
	for _, tc := range []struct {
		name    string
		regions []string
		mins    map[string]float64
		image   bool // an obsolete source_image
		want    provider.Reason
		cap     provider.Capacity
		message string // in the verdict's message
	}{
		{"one region", []string{"us-central1"}, testMins, false, provider.ReasonReady,
			known(2, "region us-central1 CPUS"), "Compute answered"}, // 18/8 CPUS, 21 INSTANCES, 5 IN_USE_ADDRESSES
		{"need at the boundary", []string{"us-central1"}, map[string]float64{"CPUS": 6}, false, provider.ReasonReady,
			known(3, "region us-central1 CPUS"), "Compute answered"},
		{"need equal to the headroom", []string{"us-central1"}, map[string]float64{"CPUS": 18}, false, provider.ReasonReady,
			known(1, "region us-central1 CPUS"), "Compute answered"},
		{"need one more than the headroom", []string{"us-central1"}, map[string]float64{"CPUS": 19}, false, ReasonQuotaExhausted,
			known(0, "region us-central1 CPUS"), "quota CPUS usage 6 of limit 24 leaves 18, 19 required"},
		{"fractional need", []string{"us-central1"}, map[string]float64{"IN_USE_ADDRESSES": 0.3}, false, provider.ReasonReady,
			known(16, "region us-central1 IN_USE_ADDRESSES"), "Compute answered"}, // 5 / 0.3
		{"need of zero", []string{"us-central1"}, map[string]float64{"CPUS": 0}, false, provider.ReasonReady,
			provider.Capacity{}, "Compute answered"},
		{"the tighter region binds", []string{"us-central1", "europe-west4"}, testMins, false, ReasonQuotaExhausted,
			known(0, "region europe-west4 CPUS"), "region europe-west4: quota CPUS usage 20 of limit 24 leaves 4, 8 required"},
		{"a down region counts 0", []string{"us-central1", "us-east4"}, testMins, false, ReasonRegionDown,
			known(0, "region us-east4 DOWN"), "Compute reports region us-east4 DOWN"},
		{"a region without quota data counts for nothing", []string{"us-central1", "asia-east1"}, testMins, false, provider.ReasonReady,
			known(2, "region us-central1 CPUS"), "no quota data for region asia-east1"},
		{"no region with quota data: unknown", []string{"asia-east1"}, testMins, false, provider.ReasonReady,
			provider.Capacity{}, "no quota data for region asia-east1"},
		{"unusable numbers count for nothing", []string{"us-west1"}, testMins, false, provider.ReasonReady,
			provider.Capacity{}, "not a number a quota can have"},
		{"a metric listed twice: the tighter listing", []string{"us-west2"}, testMins, false, ReasonQuotaExhausted,
			known(0, "region us-west2 CPUS"), "usage 24 of limit 24"},
		{"an unavailable image fits none", []string{"us-central1"}, testMins, true, ReasonImageUnavailable,
			known(0, string(ReasonImageUnavailable)), "is OBSOLETE"},
		{"no regions: no capacity", nil, nil, false, provider.ReasonReady, provider.Capacity{}, "Compute answered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newPlacementAPI(t, http.StatusOK, "aggregated-instances.json", answers,
				map[string]recorded{debianImage: {http.StatusOK, "images-obsolete.json"}})
			c, _ := newPlacementChecker(t, api.URL, nil, func(g *Entry) {
				g.Regions, g.MinQuotaHeadroom = tc.regions, tc.mins
				if tc.image {
					g.SourceImage = debianImage
				}
			})
			v := check(t, c, hang)
			if v.Reason != tc.want || v.Capacity != tc.cap || !strings.Contains(v.Message, tc.message) {
				t.Errorf("got %s, capacity %+v, %q\nwant %s, capacity %+v, a message with %q", v.Reason, v.Capacity, v.Message, tc.want, tc.cap, tc.message)
			}
		})
	}
}

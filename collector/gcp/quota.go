package gcp

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	gax "github.com/googleapis/gax-go/v2"
	"github.com/googleapis/gax-go/v2/callctx"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// ReasonQuotaExhausted says a configured min_quota_headroom is not met in a
// configured region (docs/metrics.md: "Reasons"). Compute answered, so up = 1.
const ReasonQuotaExhausted provider.Reason = "QuotaExhausted"

// ReasonRegionDown says Compute reports a configured region's status as
// DOWN (docs/metrics.md: "Reasons"): no instance can be placed there.
// Compute answered, so up = 1.
const ReasonRegionDown provider.Reason = "RegionDown"

// regionDown is the region status that gives RegionDown; the other one
// Compute knows is UP.
const regionDown = "DOWN"

// quotaFieldMask keeps only what the verdict reads of a region: Compute's
// answer then carries no zone list, self links and the like. It goes in
// the X-Goog-FieldMask header, the header form of the fields system
// parameter, since the generated client has no way to add a query
// parameter.
const quotaFieldMask = "quotas,quotaStatusWarning,status"

// regionsConcurrency is how many regions.get of one check are in flight
// at once (docs/security.md: "What the exporter bounds"): each answer may
// be up to smallAnswerLimit, and a long regions list would otherwise open
// as many connections at the same moment.
const regionsConcurrency = 8

// fieldMaskHeader is the header Google APIs read a field mask from.
const fieldMaskHeader = "X-Goog-FieldMask"

// Quota is one quota metric of a region as Compute reports it.
type Quota struct {
	Usage, Limit float64
}

// RegionQuota is what regions.get said about one region: its status and
// the configured metrics. Every string in it is bounded.
type RegionQuota struct {
	Region string
	// Status is the region's status as Compute writes it (UP, DOWN).
	Status string
	// Quotas are the configured metrics with usable numbers, by metric;
	// nil when NoData is set, and then the region's quota series are
	// absent.
	Quotas map[string]Quota
	// NoData says why Compute's answer holds no quota data for the region
	// (a quotaStatusWarning, a configured metric it does not list); empty
	// when it does. It is not exhaustion: the verdict stays the list
	// call's, and the message says why the region was not judged.
	NoData string
	// Unusable says, by metric, why a configured metric Compute lists is
	// not judged: its usage or limit is not a number a quota can have
	// (NaN, ±Inf, negative). Such a metric is not in Quotas, so its series
	// are absent, as a missing metric's are.
	Unusable map[string]string
}

// newRegionsClient builds a Compute Regions REST client with the options
// of the checker's instances client: the same endpoint, credentials and
// bounded transport.
func (c *Checker) newRegionsClient(ctx context.Context, credsJSON []byte) (*compute.RegionsClient, error) {
	opts, err := c.clientOptions(ctx, credsJSON)
	if err != nil {
		return nil, err
	}
	client, err := compute.NewRegionsRESTClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("build Compute regions client: %w", err)
	}
	return client, nil
}

// fetchRegionQuotas makes one regions.get per region under ctx, at most
// regionsConcurrency at once, with no retries (a check is its requests;
// see Check), and reads the status and configured metrics of each answer.
// A failed request fails the whole fetch with the error of the first
// region in configured order that failed, so the verdict does not depend
// on which answer came first; it is to be classified as the list call's
// errors are (verdict, classify): a region that does not exist is
// NotFound.
func (c *Checker) fetchRegionQuotas(ctx context.Context, logger *slog.Logger, client *compute.RegionsClient, regions, metrics []string) ([]RegionQuota, error) {
	// Get passes its context on, but deadlineTransport only lets a request
	// through that carries the id of a check.
	id, done := c.deadlines.register(ctx, smallAnswerLimit)
	defer done()
	cctx := callctx.SetHeaders(ctx, checkIDHeader, id, fieldMaskHeader, quotaFieldMask)
	out := make([]RegionQuota, len(regions))
	errs := make([]error, len(regions))
	// A region's answer is read and dropped before its worker asks the
	// next, so at most regionsConcurrency answers are held at once.
	// Each worker is a goroutine the engine's recover does not reach: a
	// panic in a region's request or answer is that region's error, which
	// classify makes Unknown (provider.CatchPanic).
	boundedEach(len(regions), regionsConcurrency, func(i int) {
		errs[i] = provider.CatchPanic(func() error {
			region := regions[i]
			logger.Debug("getting region", "project", c.project, "region", region, "fields", quotaFieldMask)
			r, err := client.Get(cctx, &computepb.GetRegionRequest{Project: c.project, Region: region},
				gax.WithRetry(func() gax.Retryer { return nil }))
			if err != nil {
				return answerOf("a region", fmt.Errorf("get region %s of project %s: %w", region, c.project, err))
			}
			out[i] = regionQuota(region, r, metrics)
			return nil
		})
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// boundedEach calls f(0) … f(n-1), at most limit of them at once, in that
// order of start, and returns when all have returned.
func boundedEach(n, limit int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(limit, n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}

// regionQuota reads the status and the configured metrics of one region's
// answer, keeping none of Compute's strings whole: a warning may be
// megabytes long.
func regionQuota(region string, r *computepb.Region, metrics []string) RegionQuota {
	rq := RegionQuota{Region: region, Status: provider.BoundString(r.GetStatus())}
	if w := r.GetQuotaStatusWarning(); w != nil {
		rq.NoData = provider.BoundString(fmt.Sprintf("Compute has no quota data for region %s: %s: %s", region,
			provider.BoundString(w.GetCode()), provider.BoundString(w.GetMessage())))
		return rq
	}
	// Every listing of a configured metric: Compute may list one twice.
	listed := make(map[string][]Quota, len(metrics))
	for _, m := range metrics {
		listed[m] = nil
	}
	for _, q := range r.GetQuotas() {
		if l, ok := listed[q.GetMetric()]; ok {
			listed[q.GetMetric()] = append(l, Quota{Usage: q.GetUsage(), Limit: q.GetLimit()})
		}
	}
	rq.Quotas = make(map[string]Quota, len(metrics))
	var missing []string
	for _, m := range metrics {
		if len(listed[m]) == 0 {
			missing = append(missing, m)
			continue
		}
		q, why := leastHeadroom(listed[m])
		if why != "" {
			if rq.Unusable == nil {
				rq.Unusable = map[string]string{}
			}
			rq.Unusable[m] = fmt.Sprintf("Compute's quota %s for region %s has %s, not a number a quota can have: not judged", m, region, why)
			continue
		}
		rq.Quotas[m] = q
	}
	if len(missing) > 0 {
		rq.Quotas, rq.Unusable = nil, nil
		rq.NoData = fmt.Sprintf("Compute lists no quota %s for region %s", strings.Join(missing, ", "), region)
	}
	return rq
}

// leastHeadroom picks, of the listings of one metric, the usable one with
// the least limit − usage: a metric listed twice is judged by the tighter
// listing, so an exhausted one is never hidden by another. When no listing
// is usable it says why the first is not.
func leastHeadroom(listings []Quota) (Quota, string) {
	var best Quota
	found := false
	for _, q := range listings {
		if unusable(q) != "" {
			continue
		}
		if !found || q.Limit-q.Usage < best.Limit-best.Usage {
			best, found = q, true
		}
	}
	if !found {
		return Quota{}, unusable(listings[0])
	}
	return best, ""
}

// unusable says why a quota's numbers cannot be judged, or "": a NaN or
// infinite usage or limit, or a negative one, would judge a region Ready
// (NaN compares false) or export a value no quota has.
func unusable(q Quota) string {
	for _, f := range []struct {
		name string
		v    float64
	}{{"limit", q.Limit}, {"usage", q.Usage}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return f.name + " " + num(f.v)
		}
	}
	return ""
}

// downRegions judges the regions' status: every configured region Compute
// reports DOWN, named, gives RegionDown.
func downRegions(regions []RegionQuota) (provider.Reason, string) {
	var down []string
	for _, rq := range regions {
		if rq.Status == regionDown {
			down = append(down, rq.Region)
		}
	}
	switch len(down) {
	case 0:
		return provider.ReasonReady, ""
	case 1:
		return ReasonRegionDown, "Compute reports region " + down[0] + " DOWN: no instance can be placed there"
	default:
		return ReasonRegionDown, "Compute reports regions " + strings.Join(down, ", ") + " DOWN: no instance can be placed there"
	}
}

// evaluateQuotas judges the regions read against min_quota_headroom
// (metric → the least limit − usage a proxy needs). It gives
// QuotaExhausted, naming region, metric, usage and limit of every quota
// short of its minimum, or Ready, with a message naming the regions that
// could not be judged (empty when every region was).
func evaluateQuotas(regions []RegionQuota, mins map[string]float64) (provider.Reason, string) {
	metrics := make([]string, 0, len(mins))
	for m := range mins {
		metrics = append(metrics, m)
	}
	slices.Sort(metrics)
	var short, noData []string
	for _, rq := range regions {
		if rq.NoData != "" {
			noData = append(noData, rq.NoData)
			continue
		}
		for _, m := range metrics {
			if why, ok := rq.Unusable[m]; ok {
				noData = append(noData, why)
			}
		}
		for _, m := range metrics {
			q, ok := rq.Quotas[m]
			if !ok {
				// regionQuota sets NoData for a missing metric; a caller
				// that did not go through it gets no verdict on it.
				continue
			}
			if left := q.Limit - q.Usage; left < mins[m] {
				short = append(short, fmt.Sprintf("region %s: quota %s usage %s of limit %s leaves %s, %s required",
					rq.Region, m, num(q.Usage), num(q.Limit), num(max(left, 0)), num(mins[m])))
			}
		}
	}
	if len(short) > 0 {
		return ReasonQuotaExhausted, strings.Join(short, "; ")
	}
	return provider.ReasonReady, strings.Join(noData, "; ")
}

// regionsCapacity is how many more instances the configured regions take
// (docs/metrics.md: "Capacity"): the least over the regions and the
// metrics of min_quota_headroom of floor((limit − usage) / need), a DOWN
// region counting 0. A region or metric without usable quota data is not
// judged by evaluateQuotas, and counts for nothing here either: when no
// region has data and none is DOWN the capacity is unknown, not a guess.
// A constraint is 0 exactly when limit − usage < need, the comparison
// evaluateQuotas makes, so QuotaExhausted ⇔ capacity 0.
func regionsCapacity(regions []RegionQuota, mins map[string]float64, metrics []string) provider.Capacity {
	var c provider.Capacity
	for _, rq := range regions {
		if rq.Status == regionDown {
			c = c.Min(provider.Capacity{Known: true, Binding: "region " + rq.Region + " DOWN"})
			continue
		}
		for _, m := range metrics {
			if q, ok := rq.Quotas[m]; ok {
				c = c.Min(provider.ConstraintFloat(q.Limit-q.Usage, mins[m], "region "+rq.Region+" "+m))
			}
		}
	}
	return c
}

// num writes a quota value as Compute does, without a trailing ".0".
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

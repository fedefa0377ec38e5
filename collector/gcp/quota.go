package gcp

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	gax "github.com/googleapis/gax-go/v2"
	"github.com/googleapis/gax-go/v2/callctx"

	"github.com/egress-proxies/provider_health_exporter/collector"
)

// ReasonQuotaExhausted says a configured min_quota_headroom is not met in a
// configured region (docs/metrics.md: "Reasons"). Compute answered, so up = 1.
const ReasonQuotaExhausted collector.Reason = "QuotaExhausted"

// quotaFieldMask keeps only what the headroom verdict reads of a region:
// Compute's answer then carries no zone list, self links and the like. It
// goes in the X-Goog-FieldMask header, the header form of the fields system
// parameter, since the generated client has no way to add a query
// parameter.
const quotaFieldMask = "quotas,quotaStatusWarning"

// fieldMaskHeader is the header Google APIs read a field mask from.
const fieldMaskHeader = "X-Goog-FieldMask"

// Quota is one quota metric of a region as Compute reports it.
type Quota struct {
	Usage, Limit float64
}

// RegionQuota is what regions.get said about the configured metrics of
// one region.
type RegionQuota struct {
	Region string
	// Quotas are the configured metrics, by metric; nil when NoData is set,
	// and then the region's quota series are absent.
	Quotas map[string]Quota
	// NoData says why Compute's answer holds no quota data for the region
	// (a quotaStatusWarning, a configured metric it does not list); empty
	// when it does. It is not exhaustion: the verdict stays the list
	// call's, and the message says why the region was not judged.
	NoData string
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

// fetchRegionQuotas makes one regions.get per region, all at once under
// ctx, with no retries (a check is its requests; see Check), and reads the
// configured metrics of each answer. A failed request fails the whole
// fetch with the error of the first region in configured order that failed,
// so the verdict does not depend on which answer came first; it is to be
// classified as the list call's errors are (verdict, classify): a region
// that does not exist is NotFound.
func (c *Checker) fetchRegionQuotas(ctx context.Context, logger *slog.Logger, client *compute.RegionsClient, regions, metrics []string) ([]RegionQuota, error) {
	// Get passes its context on, but deadlineTransport only lets a request
	// through that carries the id of a check.
	id, done := c.deadlines.register(ctx)
	defer done()
	cctx := callctx.SetHeaders(ctx, checkIDHeader, id, fieldMaskHeader, quotaFieldMask)
	out := make([]RegionQuota, len(regions))
	errs := make([]error, len(regions))
	var wg sync.WaitGroup
	for i, region := range regions {
		wg.Go(func() {
			logger.Debug("getting region quotas", "project", c.project, "region", region, "fields", quotaFieldMask)
			r, err := client.Get(cctx, &computepb.GetRegionRequest{Project: c.project, Region: region},
				gax.WithRetry(func() gax.Retryer { return nil }))
			if err != nil {
				errs[i] = fmt.Errorf("get quotas of region %s of project %s: %w", region, c.project, err)
				return
			}
			out[i] = regionQuota(region, r, metrics)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// regionQuota reads the configured metrics of one region's answer.
func regionQuota(region string, r *computepb.Region, metrics []string) RegionQuota {
	rq := RegionQuota{Region: region}
	if w := r.GetQuotaStatusWarning(); w != nil {
		rq.NoData = fmt.Sprintf("Compute has no quota data for region %s: %s: %s", region, w.GetCode(), w.GetMessage())
		return rq
	}
	all := make(map[string]Quota, len(r.GetQuotas()))
	for _, q := range r.GetQuotas() {
		all[q.GetMetric()] = Quota{Usage: q.GetUsage(), Limit: q.GetLimit()}
	}
	rq.Quotas = make(map[string]Quota, len(metrics))
	var missing []string
	for _, m := range metrics {
		q, ok := all[m]
		if !ok {
			missing = append(missing, m)
			continue
		}
		rq.Quotas[m] = q
	}
	if len(missing) > 0 {
		rq.Quotas = nil
		rq.NoData = fmt.Sprintf("Compute lists no quota %s for region %s", strings.Join(missing, ", "), region)
	}
	return rq
}

// evaluateQuotas judges the regions read against min_quota_headroom
// (metric → the least limit − usage a proxy needs). It gives
// QuotaExhausted, naming region, metric, usage and limit of every quota
// short of its minimum, or Ready, with a message naming the regions that
// could not be judged (empty when every region was).
func evaluateQuotas(regions []RegionQuota, mins map[string]float64) (collector.Reason, string) {
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
	return collector.ReasonReady, strings.Join(noData, "; ")
}

// num writes a quota value as Compute does, without a trailing ".0".
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

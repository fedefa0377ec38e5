package gcp

import (
	"context"
	"errors"
	"log/slog"

	compute "cloud.google.com/go/compute/apiv1"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The gcp families of the metrics table of docs/metrics.md: "Metrics":
// the configured quota metrics of the configured regions.
var (
	quotaLabels    = []string{"name", "region", "metric"}
	quotaLimitDesc = prometheus.NewDesc("provider_health_gcp_quota_limit",
		"A region's Compute quota limit of a metric named in min_quota_headroom.", quotaLabels, nil)
	quotaUsageDesc = prometheus.NewDesc("provider_health_gcp_quota_usage",
		"A region's Compute quota usage of a metric named in min_quota_headroom.", quotaLabels, nil)
)

// checkQuotas is the regions part of a check whose list call passed: one
// regions.get per region under the same deadline, classified like the list
// call when one fails; a region Compute reports DOWN gives RegionDown,
// else the quotas are judged against min_quota_headroom. A region (or a
// metric) without usable quota data is not judged: the message says why,
// and it is logged once per change. It also returns each region's own
// capacity, in configured order (nil when the regions were not read), for
// the entry's domains.
func (c *Checker) checkQuotas(ctx context.Context, logger *slog.Logger, client *compute.RegionsClient, v provider.Verdict) (provider.Verdict, []provider.Capacity) {
	if client == nil {
		return verdict(ctx, logger, errNoRegionsClient), nil
	}
	regions, err := c.fetchRegionQuotas(ctx, logger, client, c.regions, c.metrics)
	if err != nil {
		return verdict(ctx, logger, err), nil
	}
	// Judged before labelSafe: what cannot be a label is still judged.
	downReason, downMsg := downRegions(regions)
	reason, msg := evaluateQuotas(regions, c.mins)
	v.Capacity = regionsCapacity(regions, c.mins, c.metrics)
	caps := make([]provider.Capacity, len(regions))
	for i, rq := range regions {
		caps[i] = regionCapacity(rq, c.mins, c.metrics)
	}
	v.Facts = &Facts{Regions: labelSafe(logger, regions), metrics: c.metrics}
	if downReason != provider.ReasonReady {
		v.Reason, v.Message = downReason, downMsg
		return v, caps
	}
	if reason != provider.ReasonReady {
		v.Reason, v.Message = reason, msg
		return v, caps
	}
	c.logNoData(msg)
	if msg != "" {
		v.Message += "; " + msg
	}
	return v, caps
}

// logNoData logs what regions could not be judged when it changed: Compute
// may say so for a long time, and a line per check would drown the log.
func (c *Checker) logNoData(msg string) {
	c.mu.Lock()
	changed := msg != c.noData
	c.noData = msg
	c.mu.Unlock()
	switch {
	case !changed:
	case msg == "":
		c.logger.Info("quota data of every configured region is back")
	default:
		c.logger.Warn("regions without quota data are not judged", "why", provider.BoundString(msg))
	}
}

// labelSafe keeps of the regions' quotas only what may become label
// values (provider.ValidLabelValue), logging what it drops: the region
// and metric come from the configuration, which the loader checked, but a
// label the client library rejects would cost the whole scrape.
func labelSafe(logger *slog.Logger, regions []RegionQuota) []RegionQuota {
	for i, rq := range regions {
		if !provider.ValidLabelValue(rq.Region) {
			logger.Warn("quota series dropped: the region is not a valid label value", "region", provider.BoundString(rq.Region))
			regions[i].Quotas = nil
			continue
		}
		for m := range rq.Quotas {
			if !provider.ValidLabelValue(m) {
				logger.Warn("quota series dropped: the metric is not a valid label value", "region", rq.Region, "metric", provider.BoundString(m))
				delete(rq.Quotas, m)
			}
		}
	}
	return regions
}

// Facts are the region readings of an entry with regions and the source
// image of an entry with source_image; a check with neither has none.
type Facts struct {
	Regions []RegionQuota
	metrics []string // sorted, for a stable order of series and details
	// Image is the last look at source_image; nil when not asked for.
	Image *ImageState
}

var _ provider.Facts = (*Facts)(nil)

// Collect sends the configured metrics of the regions with usable quota
// data. A series the client library refuses is left out rather than
// panicking (labelSafe logged why when the check ran).
func (f *Facts) Collect(ch chan<- prometheus.Metric, name, _ string) {
	for _, rq := range f.Regions {
		for _, m := range f.metrics {
			q, ok := rq.Quotas[m]
			if !ok {
				continue
			}
			limit, err1 := prometheus.NewConstMetric(quotaLimitDesc, prometheus.GaugeValue, q.Limit, name, rq.Region, m)
			usage, err2 := prometheus.NewConstMetric(quotaUsageDesc, prometheus.GaugeValue, q.Usage, name, rq.Region, m)
			if err1 != nil || err2 != nil {
				continue
			}
			ch <- limit
			ch <- usage
		}
	}
}

// Details are each region's status and configured quotas, "usage of
// limit", or why it has none, and what source_image resolved to.
func (f *Facts) Details() map[string]string {
	d := map[string]string{}
	for _, rq := range f.Regions {
		if rq.Status != "" {
			d["region "+rq.Region+" status"] = rq.Status
		}
		if rq.NoData != "" {
			d["region "+rq.Region] = rq.NoData
			continue
		}
		for _, m := range f.metrics {
			if q, ok := rq.Quotas[m]; ok {
				d["quota "+rq.Region+" "+m] = num(q.Usage) + " of " + num(q.Limit)
			} else if why, ok := rq.Unusable[m]; ok {
				d["quota "+rq.Region+" "+m] = why
			}
		}
	}
	if f.Image != nil {
		f.Image.details(d)
	}
	return d
}

// errNoRegionsClient would mean a checker with regions built no regions
// client: a bug, reported as Unknown rather than a panic.
var errNoRegionsClient = errors.New("no Compute regions client")

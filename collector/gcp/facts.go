package gcp

import (
	"context"
	"errors"
	"log/slog"

	compute "cloud.google.com/go/compute/apiv1"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/provider_health_exporter/collector"
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

// checkQuotas is the quota part of a check whose list call passed: one
// regions.get per region under the same deadline, classified like the list
// call when one fails, then judged against min_quota_headroom. A region
// without quota data is not judged: the message says why, and it is logged
// once per change.
func (c *Checker) checkQuotas(ctx context.Context, logger *slog.Logger, client *compute.RegionsClient, v collector.Verdict) collector.Verdict {
	if client == nil {
		return verdict(ctx, logger, errNoRegionsClient)
	}
	regions, err := c.fetchRegionQuotas(ctx, logger, client, c.regions, c.metrics)
	if err != nil {
		return verdict(ctx, logger, err)
	}
	v.Facts = &Facts{Regions: regions, metrics: c.metrics}
	reason, msg := evaluateQuotas(regions, c.mins)
	if reason != collector.ReasonReady {
		v.Reason, v.Message = reason, msg
		return v
	}
	c.logNoData(msg)
	if msg != "" {
		v.Message += "; " + msg
	}
	return v
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
		c.logger.Warn("regions without quota data are not judged", "why", msg)
	}
}

// Facts are the quota readings of an entry with regions; a check without
// them has none.
type Facts struct {
	Regions []RegionQuota
	metrics []string // sorted, for a stable order of series and details
}

var _ collector.Facts = (*Facts)(nil)

// Collect sends the configured metrics of the regions with quota data.
func (f *Facts) Collect(ch chan<- prometheus.Metric, name, _ string) {
	for _, rq := range f.Regions {
		for _, m := range f.metrics {
			q, ok := rq.Quotas[m]
			if !ok {
				continue
			}
			ch <- prometheus.MustNewConstMetric(quotaLimitDesc, prometheus.GaugeValue, q.Limit, name, rq.Region, m)
			ch <- prometheus.MustNewConstMetric(quotaUsageDesc, prometheus.GaugeValue, q.Usage, name, rq.Region, m)
		}
	}
}

// Details are each region's configured quotas, "usage of limit", or why
// it has none.
func (f *Facts) Details() map[string]string {
	d := map[string]string{}
	for _, rq := range f.Regions {
		if rq.NoData != "" {
			d["region "+rq.Region] = rq.NoData
			continue
		}
		for _, m := range f.metrics {
			if q, ok := rq.Quotas[m]; ok {
				d["quota "+rq.Region+" "+m] = num(q.Usage) + " of " + num(q.Limit)
			}
		}
	}
	return d
}

// errNoRegionsClient would mean a checker with regions built no regions
// client: a bug, reported as Unknown rather than a panic.
var errNoRegionsClient = errors.New("no Compute regions client")

package gcp

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	gax "github.com/googleapis/gax-go/v2"
	"github.com/googleapis/gax-go/v2/callctx"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// An entry's regions are its failure domains (docs/configuration.md:
// "Capacity per region"): per region the copies its quotas leave, the
// proxies the entry's filter finds there, and what the other regions
// leave once it is lost and its proxies are created again elsewhere.

// The paging of the proxies' count: Compute's largest page, and the most
// pages one check reads. Past them the count is not known, and a guess
// would be a wrong after-loss: the entry exports no domain series.
const (
	domainPageSize = 500
	maxDomainPages = 20
)

// instancesFieldMask keeps of each page what the count reads: the scopes'
// keys come with any field of theirs, and of an instance its name, so a
// page of 500 instances is some 40 KB instead of megabytes. It is the
// fields system parameter's syntax (a/*/b), in its header form, as
// quotaFieldMask is.
const instancesFieldMask = "kind,nextPageToken,items/*/instances/name"

// countProxies pages through the aggregated instance list with the entry's
// filter, at most maxDomainPages pages of domainPageSize, and counts the
// instances per configured region, a zone's region being its name less
// the last part ("zones/us-central1-a" is in us-central1). Instances of
// other regions are not counted. more is true when the bound was reached
// with pages left: the counts are then not complete.
func (c *Checker) countProxies(ctx context.Context, logger *slog.Logger, client *compute.InstancesClient) (counts map[string]int64, more bool, err error) {
	id, done := c.deadlines.register(ctx, 0)
	defer done()
	cctx := callctx.SetHeaders(ctx, checkIDHeader, id, fieldMaskHeader, instancesFieldMask)
	req := &computepb.AggregatedListInstancesRequest{Project: c.project}
	if c.filter != "" {
		req.Filter = proto.String(c.filter)
	}
	counts = make(map[string]int64, len(c.regions))
	for _, r := range c.regions {
		counts[r] = 0
	}
	// A fresh iterator per page: InternalFetch reads the one page it is
	// given the token of, and no more.
	token := ""
	for page := range maxDomainPages {
		it := client.AggregatedList(cctx, req, gax.WithRetry(func() gax.Retryer { return nil }))
		logger.Debug("counting proxies", "project", c.project, "filter", c.filter, "page", page+1, "max_results", domainPageSize)
		pairs, next, err := it.InternalFetch(domainPageSize, token)
		if err != nil {
			return nil, false, fmt.Errorf("list instances of project %s, page %d: %w", c.project, page+1, err)
		}
		if resp, _ := it.Response.(*computepb.InstanceAggregatedList); resp == nil || resp.GetKind() != aggregatedListKind {
			// As the list call's answer of another kind: BadResponse
			// (classify reads proto.Error as a body that is not the answer).
			return nil, false, fmt.Errorf("page %d has kind %q instead of %s: %w", page+1, provider.BoundString(resp.GetKind()), aggregatedListKind, proto.Error)
		}
		for _, p := range pairs {
			if r, ok := zoneRegion(p.Key); ok {
				if _, configured := counts[r]; configured {
					counts[r] += int64(len(p.Value.GetInstances()))
				}
			}
		}
		if next == "" {
			return counts, false, nil
		}
		token = next
	}
	return counts, true, nil
}

// zoneRegion is the region of an aggregated list's zone scope
// ("zones/us-central1-a" → us-central1); false for any other scope.
func zoneRegion(scope string) (string, bool) {
	zone, ok := strings.CutPrefix(scope, "zones/")
	i := strings.LastIndexByte(zone, '-')
	if !ok || i <= 0 {
		return "", false
	}
	return zone[:i], true
}

// regionCapacity is one region's capacity as regionsCapacity counts it
// for the whole entry: floor((limit − usage) / need), least over the
// metrics, a DOWN region 0; unknown for a region without usable quota
// data or with only needs of 0.
func regionCapacity(rq RegionQuota, mins map[string]float64, metrics []string) provider.Capacity {
	return regionsCapacity([]RegionQuota{rq}, mins, metrics)
}

// regionDomains are the entry's domains from its regions' quotas and the
// proxies counted in each: AfterLoss of a region is the sum of the other
// regions' capacities less its own proxies, clamped to
// provider.MaxCapacity. blocked (a reason that leaves no room anywhere,
// an unavailable image) makes every capacity 0.
func regionDomains(regions []string, caps []provider.Capacity, proxies map[string]int64, blocked bool) []provider.Domain {
	out := make([]provider.Domain, len(regions))
	var total int64
	for i, r := range regions {
		out[i] = provider.Domain{Name: r, Proxies: proxies[r], HasAfterLoss: true}
		if !blocked {
			out[i].Capacity = caps[i].Proxies
		}
		total += out[i].Capacity
	}
	for i := range out {
		out[i].AfterLoss = min(total-out[i].Capacity, provider.MaxCapacity) - out[i].Proxies
	}
	return out
}

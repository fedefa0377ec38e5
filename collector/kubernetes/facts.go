package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The kubernetes families of the metrics table of docs/metrics.md:
// "Metrics": the configured resources of the namespace's ResourceQuotas.
var (
	quotaLabels   = []string{"name", "namespace", "quota", "resource"}
	quotaHardDesc = prometheus.NewDesc("provider_health_kubernetes_quota_hard",
		"A ResourceQuota's hard limit of a resource named in min_quota_headroom.", quotaLabels, nil)
	quotaUsedDesc = prometheus.NewDesc("provider_health_kubernetes_quota_used",
		"A ResourceQuota's usage of a resource named in min_quota_headroom.", quotaLabels, nil)
)

// headroomSettings are an entry's parsed headroom keys; a zero value (no
// namespace) means the check is the list call alone.
type headroomSettings struct {
	namespace string
	canI      []CanI
	mins      map[corev1.ResourceName]Quantity
	// forPod: the entry has a pod_template, whose capacity weighs the
	// namespace's quotas (capacity.go).
	forPod bool
}

// newHeadroomSettings parses the headroom keys, which the configuration
// loader has already checked.
func newHeadroomSettings(cfg *Entry) (headroomSettings, error) {
	hs := headroomSettings{namespace: cfg.Namespace, forPod: cfg.PodTemplate.Path != ""}
	for _, s := range cfg.CanI {
		ci, err := ParseCanI(s)
		if err != nil {
			return headroomSettings{}, err
		}
		hs.canI = append(hs.canI, ci)
	}
	if len(cfg.MinQuotaHeadroom) > 0 {
		hs.mins = make(map[corev1.ResourceName]Quantity, len(cfg.MinQuotaHeadroom))
		for _, name := range slices.Sorted(maps.Keys(cfg.MinQuotaHeadroom)) {
			value := cfg.MinQuotaHeadroom[name]
			if _, err := ParseQuotaMinimum(name, value); err != nil {
				return headroomSettings{}, err
			}
			q, err := parseQuantity(strings.TrimSpace(value))
			if err != nil {
				return headroomSettings{}, fmt.Errorf("min_quota_headroom %s: %w", name, err)
			}
			hs.mins[corev1.ResourceName(name)] = q
		}
	}
	return hs, nil
}

func (hs headroomSettings) set() bool { return len(hs.canI) > 0 || len(hs.mins) > 0 || hs.forPod }

// headroom runs the headroom part of a check whose list call passed:
// the can_i reviews and the quota list, then their verdict. v is the list
// call's Ready verdict.
func (c *Checker) headroom(ctx context.Context, logger *slog.Logger, cl *client, v provider.Verdict) provider.Verdict {
	hs := c.headroomSet
	facts := &Facts{Namespace: hs.namespace}
	v.Facts = facts
	h, reason, err := c.readHeadroom(ctx, logger, cl, hs.namespace, hs.canI, hs.mins, hs.forPod)
	if err != nil {
		logger.Debug("headroom requests failed", "reason", reason, "err", err)
		v.Reason, v.Message = reason, err.Error()
		return v
	}
	facts.Headroom = h
	reason, msg := evaluateHeadroom(hs.namespace, h, hs.mins)
	switch {
	case reason != provider.ReasonReady:
		v.Reason, v.Message = reason, msg
	case msg != "":
		v.Message += "; " + msg
	}
	return v
}

// Facts are the headroom readings of a cluster with namespace, can_i or
// min_quota_headroom set, and the pod_template dry run's; a check without
// them has none.
type Facts struct {
	Namespace string
	Headroom
	// PodTemplate is the pod_template file, and DryRun the outcome of its
	// last dry run (nil before the first); both empty without one.
	PodTemplate string
	DryRun      *DryRunOutcome
	// Schedule is the last fit's outcome (nil before the first), when
	// the entry sets schedule; fit is this check's fit (nil when it did
	// not get that far).
	Schedule *ScheduleOutcome
	fit      *FitResult
	// scheduled is set when the entry sets schedule.
	scheduled bool
	// needs are what one more copy of the Pod the dry run admitted adds to
	// the quotas (nil: not admitted by this check, or not read, then
	// needsErr says why).
	needs    quotaNeeds
	needsErr string
}

// capacity is the verdict's capacity from the check's readings
// (quotaCapacity, and with schedule the node fit: the least of the two,
// the quota's binding kept on a tie), and what to add to a Ready message
// when part of it could not be read.
func (f *Facts) capacity(mins map[corev1.ResourceName]Quantity) (provider.Capacity, string) {
	c := quotaCapacity(f.Headroom, mins, f.needs)
	if f.fit != nil {
		c = c.Min(provider.Capacity{Known: true, Proxies: min(f.fit.Copies, provider.MaxCapacity), Binding: "nodes"})
	}
	var notes []string
	if f.QuotaErr != "" {
		notes = append(notes, "capacity unknown: "+f.QuotaErr)
	}
	if f.needsErr != "" {
		notes = append(notes, "capacity of pod_template unknown: "+f.needsErr)
	}
	return c, strings.Join(notes, "; ")
}

var _ provider.Facts = (*Facts)(nil)

// Collect sends the quota series of the configured resources, of the
// quotas whose name is a valid label value (listQuotas).
func (f *Facts) Collect(ch chan<- prometheus.Metric, name, _ string) {
	for _, q := range f.Quotas {
		if q.NoSeries {
			continue
		}
		ch <- provider.ConstMetric(quotaHardDesc, prometheus.GaugeValue, q.Hard.Milli.Float(),
			name, f.Namespace, q.Quota, string(q.Resource))
		if !q.NoUsage {
			ch <- provider.ConstMetric(quotaUsedDesc, prometheus.GaugeValue, q.Used.Milli.Float(),
				name, f.Namespace, q.Quota, string(q.Resource))
		}
	}
}

// Details are the headroom readings of /api/v1/status: each can_i answer
// and each configured resource's used and hard of each quota.
func (f *Facts) Details() map[string]string {
	d := map[string]string{"namespace": f.Namespace}
	for _, a := range f.CanI {
		d["canI "+a.String()] = fmt.Sprint(a.Allowed)
	}
	for _, q := range f.Quotas {
		used := q.Used.String()
		if q.NoUsage {
			used = "unknown"
		}
		d["quota "+q.Quota+" "+string(q.Resource)] = used + " of " + q.Hard.String()
	}
	if f.PodTemplate != "" {
		dryRunDetails(d, f.PodTemplate, f.DryRun)
	}
	if f.scheduled {
		scheduleDetails(d, f.Schedule)
	}
	return d
}

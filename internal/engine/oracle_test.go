package engine

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
)

// namespace, boolFloat and unixSeconds are the exposition's, written
// again: the oracle shares no code with what it checks.
const namespace = "provider_health"

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

var (
	targetLabels = []string{"provider", "name", "target"}

	upDesc             = prometheus.NewDesc(namespace+"_up", exposition.UpHelp, targetLabels, nil)
	readyDesc          = prometheus.NewDesc(namespace+"_ready", exposition.ReadyHelp, targetLabels, nil)
	capacityDesc       = prometheus.NewDesc(namespace+"_capacity", exposition.CapacityHelp, targetLabels, nil)
	domainCapacityDesc = prometheus.NewDesc(namespace+"_domain_capacity", exposition.DomainCapacityHelp, append(targetLabels, "domain"), nil)
	domainProxiesDesc  = prometheus.NewDesc(namespace+"_domain_proxies", exposition.DomainProxiesHelp, append(targetLabels, "domain"), nil)
	afterLossDesc      = prometheus.NewDesc(namespace+"_capacity_after_loss", exposition.AfterLossHelp, append(targetLabels, "domain"), nil)
	reasonDesc         = prometheus.NewDesc(namespace+"_reason", exposition.ReasonHelp, append(targetLabels, "reason"), nil)
	durationDesc       = prometheus.NewDesc(namespace+"_check_duration_seconds", exposition.DurationHelp, targetLabels, nil)
	timeoutDesc        = prometheus.NewDesc(namespace+"_check_timeout_seconds", exposition.TimeoutHelp, []string{"provider", "name"}, nil)
	lastCheckDesc      = prometheus.NewDesc(namespace+"_last_check_timestamp_seconds", exposition.LastCheckHelp, targetLabels, nil)
	lastTransitionDesc = prometheus.NewDesc(namespace+"_last_transition_timestamp_seconds", exposition.LastTransitionHelp, targetLabels, nil)
	targetInfoDesc     = prometheus.NewDesc(namespace+"_target_info", exposition.TargetInfoHelp, append(targetLabels, "address"), nil)
	checksDesc         = prometheus.NewDesc(namespace+"_exporter_checks_total", exposition.ChecksHelp, []string{"provider", "name", "mode"}, nil)
	abandonedDesc      = prometheus.NewDesc(namespace+"_exporter_checks_abandoned_total", exposition.AbandonedHelp, []string{"provider", "name"}, nil)
)

// ResultCollector is the test oracle of the Exposition: the results of one
// Run as a prometheus.Collector, for a Registry to gather and expfmt to
// encode. It is built per scrape:
// the checks have already run, so Collect only translates.
type ResultCollector struct {
	Results []ProviderResult
}

// Describe sends nothing: the collector is unchecked, because which
// reason and pool-state series there are depends on the verdicts.
func (c ResultCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c ResultCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.Results {
		ch <- prometheus.MustNewConstMetric(timeoutDesc, prometheus.GaugeValue, p.Budget.Seconds(), p.Kind, p.Name)
		for _, m := range exposition.Modes {
			ch <- prometheus.MustNewConstMetric(checksDesc, prometheus.CounterValue, float64(p.Checks[m]), p.Kind, p.Name, m)
		}
		ch <- prometheus.MustNewConstMetric(abandonedDesc, prometheus.CounterValue, float64(p.Abandoned), p.Kind, p.Name)
		for _, t := range p.Targets {
			collectTarget(ch, p, t)
		}
	}
}

func collectTarget(ch chan<- prometheus.Metric, p ProviderResult, t TargetResult) {
	lv := []string{p.Kind, p.Name, t.Target.Name}
	gauge := func(d *prometheus.Desc, v float64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append(lv[:3:3], extra...)...)
	}
	gauge(upDesc, boolFloat(p.Reasons.Up(t.Reason)))
	gauge(readyDesc, boolFloat(t.Reason.Ready()))
	if t.Capacity.Known {
		gauge(capacityDesc, float64(t.Capacity.Proxies))
	}
	for _, d := range t.Domains {
		gauge(domainCapacityDesc, float64(d.Capacity), d.Name)
		gauge(domainProxiesDesc, float64(d.Proxies), d.Name)
		if d.HasAfterLoss {
			gauge(afterLossDesc, float64(d.AfterLoss), d.Name)
		}
	}
	if p.Reasons.Contains(t.Reason) {
		gauge(reasonDesc, 1, string(t.Reason))
	}
	gauge(durationDesc, t.Duration.Seconds())
	gauge(lastCheckDesc, unixSeconds(t.CheckedAt))
	if !t.LastTransition.IsZero() {
		gauge(lastTransitionDesc, unixSeconds(t.LastTransition))
	}
	gauge(targetInfoDesc, 1, t.Target.Address)

	if t.Facts != nil {
		t.Facts.Collect(ch, p.Name, t.Target.Name)
	}
}

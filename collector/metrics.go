package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "provider_health"

var (
	targetLabels = []string{"provider", "name", "target"}

	upDesc = prometheus.NewDesc(namespace+"_up",
		"1 when the provider's API answered at its own protocol level.", targetLabels, nil)
	readyDesc = prometheus.NewDesc(namespace+"_ready",
		"1 when the provider can host proxies now.", targetLabels, nil)
	reasonDesc = prometheus.NewDesc(namespace+"_reason",
		"Why the target is or is not ready: every reason of the provider's set, exactly one is 1.",
		append(targetLabels, "reason"), nil)
	durationDesc = prometheus.NewDesc(namespace+"_check_duration_seconds",
		"Wall time of the check that produced the verdict.", targetLabels, nil)
	timeoutDesc = prometheus.NewDesc(namespace+"_check_timeout_seconds",
		"The budget this scrape gave the check.", []string{"provider", "name"}, nil)
	lastCheckDesc = prometheus.NewDesc(namespace+"_last_check_timestamp_seconds",
		"When the verdict was produced (older than the scrape when reused within min_interval).", targetLabels, nil)
	lastTransitionDesc = prometheus.NewDesc(namespace+"_last_transition_timestamp_seconds",
		"When ready last changed; the first verdict counts.", targetLabels, nil)
	targetInfoDesc = prometheus.NewDesc(namespace+"_target_info",
		"Where the target is.", append(targetLabels, "address"), nil)
	checksDesc = prometheus.NewDesc(namespace+"_exporter_checks_total",
		"Checks by mode: live (ran), shared (joined an in-flight check), cached (reused within min_interval), backoff (last verdict of a target whose recent dials failed, not redialed yet).",
		[]string{"provider", "name", "mode"}, nil)
)

// ResultCollector exports the results of one Run. It is built per scrape:
// the checks have already run, so Collect only translates.
type ResultCollector struct {
	Results []ProviderResult
}

// Describe sends nothing: the collector is unchecked, because the set of
// reason and pool-state series depends on the configuration.
func (c ResultCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c ResultCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.Results {
		ch <- prometheus.MustNewConstMetric(timeoutDesc, prometheus.GaugeValue, p.Budget.Seconds(), p.Kind, p.Name)
		for _, m := range Modes {
			ch <- prometheus.MustNewConstMetric(checksDesc, prometheus.CounterValue, float64(p.Checks[m]), p.Kind, p.Name, m)
		}
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
	gauge(upDesc, boolFloat(t.Reason.Up()))
	gauge(readyDesc, boolFloat(t.Reason.Ready()))
	for _, r := range p.Reasons {
		gauge(reasonDesc, boolFloat(r == t.Reason), string(r))
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

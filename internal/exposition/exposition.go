package exposition

import (
	"cmp"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Result is a verdict with the facts of the check that produced it.
type Result struct {
	provider.Verdict
	Target    provider.Target
	CheckedAt time.Time     // when the verdict was produced
	Duration  time.Duration // wall time of the check
}

// Provider is what the exposition says of one provider entry beside its
// targets: the engine's ProviderResult has it.
type Provider struct {
	Kind, Name string
	Reasons    provider.ReasonSet
	Budget     time.Duration
	// Checks are the cumulative check counts by mode (Modes).
	Checks map[string]uint64
	// Abandoned is the cumulative count of abandoned checks.
	Abandoned uint64
}

// Series is what the exposition reads of one target: its verdict, when
// ready last changed, and the metrics of the verdict's Facts once
// collected. The engine's TargetResult has it.
type Series struct {
	Result
	LastTransition time.Time
	// Memo is the collected metrics of the verdict's Facts, nil for a
	// verdict without a check of its own (kept facts are collected at
	// every scrape).
	Memo *FactsMemo
}

// Results are one provider entry's results, as New reads them. New sorts
// Targets, and turns the verdict of a target whose Facts panic while
// collected into Unknown where Targets point.
type Results struct {
	*Provider
	Targets []*Series
}

// Exposition is the metric families of one Run's results, built to be
// encoded without going through a prometheus.Registry. It holds exactly
// what a Registry gathers from ResultCollector (same families, series,
// order and values) and writes the text and OpenMetrics formats itself,
// byte for byte as expfmt does: at a thousand targets the registry's
// per-series allocation, validation and sorting and expfmt's per-series
// checks cost ten times the writing itself (docs/scaling.md: "Performance").
// Protobuf and every format it does not write itself go through expfmt
// from the same families.
type Exposition struct {
	fams []*family // sorted by name
}

// family is one metric family. The framework's families are built already
// sorted, with flat label values; the providers' own (Facts) stay the
// client_model metrics their Collect made, sorted as Gather sorts them.
type family struct {
	name, help string
	typ        dto.MetricType
	labels     []string  // label names, sorted: the framework's families
	values     []string  // len(labels) values per series, series after series
	nums       []float64 // one value per series
	// rows are a provider's family. It has no unit (OpenMetrics'
	// # UNIT): prometheus.Gatherers, which merged the exporter's families
	// before, drops it.
	rows []*factMetric
}

func (f *family) add(v float64, lv ...string) {
	f.values = append(f.values, lv...)
	f.nums = append(f.nums, v)
}

func (f *family) len() int {
	if f.rows != nil {
		return len(f.rows)
	}
	return len(f.nums)
}

func newFamily(name, help string, typ dto.MetricType, labels ...string) *family {
	return &family{name: name, help: help, typ: typ, labels: labels}
}

// New builds the families of results. Errors are a provider's
// metrics that a Registry would refuse too (invalid, inconsistent or
// duplicate); they are left out and everything else is kept, as
// promhttp.ContinueOnError does. A target whose Facts panic while collected
// is turned into Unknown, in results too.
func New(results []Results) (*Exposition, error) {
	ps, order, n := sortedResults(results)
	// The providers' own metrics first: a target whose Facts panic while
	// collected reads Unknown in the framework's families below.
	rows, errs := gatherFacts(ps, order)
	perTarget := func(name, help string) *family {
		f := newFamily(name, help, dto.MetricType_GAUGE, "name", "provider", "target")
		f.values, f.nums = make([]string, 0, 3*n), make([]float64, 0, n)
		return f
	}
	var (
		timeout    = newFamily(namespace+"_check_timeout_seconds", TimeoutHelp, dto.MetricType_GAUGE, "name", "provider")
		checks     = newFamily(namespace+"_exporter_checks_total", ChecksHelp, dto.MetricType_COUNTER, "mode", "name", "provider")
		abandoned  = newFamily(namespace+"_exporter_checks_abandoned_total", AbandonedHelp, dto.MetricType_COUNTER, "name", "provider")
		upF        = perTarget(namespace+"_up", UpHelp)
		readyF     = perTarget(namespace+"_ready", ReadyHelp)
		capF       = newFamily(namespace+"_capacity", CapacityHelp, dto.MetricType_GAUGE, "name", "provider", "target")
		durationF  = perTarget(namespace+"_check_duration_seconds", DurationHelp)
		lastCheckF = perTarget(namespace+"_last_check_timestamp_seconds", LastCheckHelp)
		lastTransF = perTarget(namespace+"_last_transition_timestamp_seconds", LastTransitionHelp)
		domCapF    = newFamily(namespace+"_domain_capacity", DomainCapacityHelp, dto.MetricType_GAUGE, "domain", "name", "provider", "target")
		domProxF   = newFamily(namespace+"_domain_proxies", DomainProxiesHelp, dto.MetricType_GAUGE, "domain", "name", "provider", "target")
		afterLossF = newFamily(namespace+"_capacity_after_loss", AfterLossHelp, dto.MetricType_GAUGE, "domain", "name", "provider", "target")
		reasonF    = newFamily(namespace+"_reason", ReasonHelp, dto.MetricType_GAUGE, "name", "provider", "reason", "target")
		infoF      = newFamily(namespace+"_target_info", TargetInfoHelp, dto.MetricType_GAUGE, "address", "name", "provider", "target")
	)
	reasonF.values, reasonF.nums = make([]string, 0, 4*n), make([]float64, 0, n)
	infoF.values, infoF.nums = make([]string, 0, 4*n), make([]float64, 0, n)
	modes := slices.Sorted(slices.Values(Modes))
	for _, m := range modes {
		for _, p := range ps {
			checks.add(float64(p.Checks[m]), m, p.Name, p.Kind)
		}
	}
	infos := make([]targetInfo, 0, n)
	var domains []targetDomain
	for i, p := range ps {
		timeout.add(p.Budget.Seconds(), p.Name, p.Kind)
		abandoned.add(float64(p.Abandoned), p.Name, p.Kind)
		for _, t := range order[i] {
			upF.add(boolFloat(p.Reasons.Up(t.Reason)), p.Name, p.Kind, t.Target.Name)
			readyF.add(boolFloat(t.Reason.Ready()), p.Name, p.Kind, t.Target.Name)
			if t.Capacity.Known {
				capF.add(float64(t.Capacity.Proxies), p.Name, p.Kind, t.Target.Name)
			}
			durationF.add(t.Duration.Seconds(), p.Name, p.Kind, t.Target.Name)
			lastCheckF.add(unixSeconds(t.CheckedAt), p.Name, p.Kind, t.Target.Name)
			if !t.LastTransition.IsZero() {
				lastTransF.add(unixSeconds(t.LastTransition), p.Name, p.Kind, t.Target.Name)
			}
			infos = append(infos, targetInfo{p, t})
			for d := range t.Domains {
				domains = append(domains, targetDomain{p, t, d})
			}
		}
		addReasons(reasonF, p, order[i])
	}
	addTargetInfo(infoF, infos)
	addDomains(domCapF, domProxF, afterLossF, domains)

	x := &Exposition{}
	for _, f := range []*family{timeout, checks, abandoned, upF, readyF, capF, domCapF, domProxF, afterLossF, durationF, lastCheckF, lastTransF, reasonF, infoF} {
		if f.len() > 0 {
			x.fams = append(x.fams, f)
		}
	}
	facts, err := groupFacts(rows, errs, x.fams)
	x.fams = append(x.fams, facts...)
	slices.SortFunc(x.fams, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	return x, err
}

// sortedResults orders the providers by name and kind and each provider's
// targets by name, as a Registry orders series, and counts the targets,
// so every family is allocated once.
func sortedResults(results []Results) ([]*Results, [][]*Series, int) {
	ps := make([]*Results, len(results))
	for i := range results {
		ps[i] = &results[i]
	}
	slices.SortFunc(ps, func(a, b *Results) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Kind, b.Kind))
	})
	order := make([][]*Series, len(ps))
	n := 0
	for i, p := range ps {
		ts := p.Targets
		slices.SortFunc(ts, func(a, b *Series) int { return strings.Compare(a.Target.Name, b.Target.Name) })
		order[i] = ts
		n += len(ts)
	}
	return ps, order, n
}

// addReasons adds the one reason series of each of p's targets, its
// current reason at 1: the zeros of the rest of the set would cost every
// Prometheus that scrapes the exporter a series each (docs/metrics.md:
// "Reasons"). The series sort by reason, then target: ts is sorted by
// target, and a stable sort by reason keeps that order within a reason.
func addReasons(reasonF *family, p *Results, ts []*Series) {
	byReason := make([]*Series, 0, len(ts))
	for _, t := range ts {
		// The engine turns a reason outside the set into Unknown; a target
		// not checked yet has none.
		if p.Reasons.Contains(t.Reason) {
			byReason = append(byReason, t)
		}
	}
	slices.SortStableFunc(byReason, func(a, b *Series) int { return strings.Compare(string(a.Reason), string(b.Reason)) })
	for _, t := range byReason {
		reasonF.add(1, p.Name, p.Kind, string(t.Reason), t.Target.Name)
	}
}

// targetInfo is one target_info series to be: its family is sorted by
// address first, the first label.
type targetInfo struct {
	p *Results
	t *Series
}

func addTargetInfo(infoF *family, infos []targetInfo) {
	slices.SortFunc(infos, func(a, b targetInfo) int {
		return cmp.Or(strings.Compare(a.t.Target.Address, b.t.Target.Address),
			strings.Compare(a.p.Name, b.p.Name), strings.Compare(a.p.Kind, b.p.Kind),
			strings.Compare(a.t.Target.Name, b.t.Target.Name))
	})
	for _, in := range infos {
		infoF.add(1, in.t.Target.Address, in.p.Name, in.p.Kind, in.t.Target.Name)
	}
}

// targetDomain is one failure domain of a target (provider.Domain): its
// families are sorted by domain first, the first label.
type targetDomain struct {
	p *Results
	t *Series
	i int // in t.Domains
}

// addDomains adds the series of every target's failure domains, which the
// engine has settled (one series per name and target, figures in range).
// The after-loss series is there only where the kind could say it
// (HasAfterLoss): a KVM host's comes from the mixin's recording rule.
func addDomains(capF, proxF, lossF *family, ds []targetDomain) {
	slices.SortFunc(ds, func(a, b targetDomain) int {
		return cmp.Or(strings.Compare(a.t.Domains[a.i].Name, b.t.Domains[b.i].Name),
			strings.Compare(a.p.Name, b.p.Name), strings.Compare(a.p.Kind, b.p.Kind),
			strings.Compare(a.t.Target.Name, b.t.Target.Name))
	})
	for _, f := range []*family{capF, proxF, lossF} {
		f.values, f.nums = make([]string, 0, 4*len(ds)), make([]float64, 0, len(ds))
	}
	for _, td := range ds {
		d := td.t.Domains[td.i]
		lv := []string{d.Name, td.p.Name, td.p.Kind, td.t.Target.Name}
		capF.add(float64(d.Capacity), lv...)
		proxF.add(float64(d.Proxies), lv...)
		if d.HasAfterLoss {
			lossF.add(float64(d.AfterLoss), lv...)
		}
	}
}

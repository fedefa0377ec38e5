package collector

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const namespace = "provider_health"

// The help of the framework's families, shared by their Descs and the
// Exposition.
const (
	upHelp             = "1 when the provider's API answered at its own protocol level."
	readyHelp          = "1 when the provider can host proxies now."
	reasonHelp         = "Why the target is or is not ready: every reason of the provider's set, exactly one is 1."
	durationHelp       = "Wall time of the check that produced the verdict."
	timeoutHelp        = "The budget this scrape gave the check."
	lastCheckHelp      = "When the verdict was produced (older than the scrape when reused within min_interval)."
	lastTransitionHelp = "When ready last changed; the first verdict counts."
	targetInfoHelp     = "Where the target is."
	abandonedHelp      = "Checks still running at their deadline plus the grace, left to end with their context; the target got Timeout."
	checksHelp         = "Checks by mode: live (ran), shared (joined an in-flight check), cached (reused within min_interval), backoff (last verdict of a target whose recent dials failed, not redialed yet)."
)

var (
	targetLabels = []string{"provider", "name", "target"}

	upDesc             = prometheus.NewDesc(namespace+"_up", upHelp, targetLabels, nil)
	readyDesc          = prometheus.NewDesc(namespace+"_ready", readyHelp, targetLabels, nil)
	reasonDesc         = prometheus.NewDesc(namespace+"_reason", reasonHelp, append(targetLabels, "reason"), nil)
	durationDesc       = prometheus.NewDesc(namespace+"_check_duration_seconds", durationHelp, targetLabels, nil)
	timeoutDesc        = prometheus.NewDesc(namespace+"_check_timeout_seconds", timeoutHelp, []string{"provider", "name"}, nil)
	lastCheckDesc      = prometheus.NewDesc(namespace+"_last_check_timestamp_seconds", lastCheckHelp, targetLabels, nil)
	lastTransitionDesc = prometheus.NewDesc(namespace+"_last_transition_timestamp_seconds", lastTransitionHelp, targetLabels, nil)
	targetInfoDesc     = prometheus.NewDesc(namespace+"_target_info", targetInfoHelp, append(targetLabels, "address"), nil)
	checksDesc         = prometheus.NewDesc(namespace+"_exporter_checks_total", checksHelp, []string{"provider", "name", "mode"}, nil)
	abandonedDesc      = prometheus.NewDesc(namespace+"_exporter_checks_abandoned_total", abandonedHelp, []string{"provider", "name"}, nil)
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

// NewExposition builds the families of results. Errors are a provider's
// metrics that a Registry would refuse too (invalid, inconsistent or
// duplicate); they are left out and everything else is kept, as
// promhttp.ContinueOnError does.
func NewExposition(results []ProviderResult) (*Exposition, error) {
	ps := make([]*ProviderResult, len(results))
	for i := range results {
		ps[i] = &results[i]
	}
	slices.SortFunc(ps, func(a, b *ProviderResult) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Kind, b.Kind))
	})
	// Each provider's targets in target order, and the number of series
	// per family, so every family is allocated once.
	order := make([][]*TargetResult, len(ps))
	n := 0
	for i, p := range ps {
		ts := make([]*TargetResult, len(p.Targets))
		for j := range p.Targets {
			ts[j] = &p.Targets[j]
		}
		slices.SortFunc(ts, func(a, b *TargetResult) int { return strings.Compare(a.Target.Name, b.Target.Name) })
		order[i] = ts
		n += len(ts)
	}
	perTarget := func(name, help string) *family {
		f := newFamily(name, help, dto.MetricType_GAUGE, "name", "provider", "target")
		f.values, f.nums = make([]string, 0, 3*n), make([]float64, 0, n)
		return f
	}
	var (
		timeout    = newFamily(namespace+"_check_timeout_seconds", timeoutHelp, dto.MetricType_GAUGE, "name", "provider")
		checks     = newFamily(namespace+"_exporter_checks_total", checksHelp, dto.MetricType_COUNTER, "mode", "name", "provider")
		abandoned  = newFamily(namespace+"_exporter_checks_abandoned_total", abandonedHelp, dto.MetricType_COUNTER, "name", "provider")
		upF        = perTarget(namespace+"_up", upHelp)
		readyF     = perTarget(namespace+"_ready", readyHelp)
		durationF  = perTarget(namespace+"_check_duration_seconds", durationHelp)
		lastCheckF = perTarget(namespace+"_last_check_timestamp_seconds", lastCheckHelp)
		lastTransF = perTarget(namespace+"_last_transition_timestamp_seconds", lastTransitionHelp)
		reasonF    = newFamily(namespace+"_reason", reasonHelp, dto.MetricType_GAUGE, "name", "provider", "reason", "target")
		infoF      = newFamily(namespace+"_target_info", targetInfoHelp, dto.MetricType_GAUGE, "address", "name", "provider", "target")
	)
	reasons := 0
	for i, p := range ps {
		reasons += len(p.Reasons) * len(order[i])
	}
	reasonF.values, reasonF.nums = make([]string, 0, 4*reasons), make([]float64, 0, reasons)
	infoF.values, infoF.nums = make([]string, 0, 4*n), make([]float64, 0, n)
	modes := slices.Sorted(slices.Values(Modes))
	for _, m := range modes {
		for _, p := range ps {
			checks.add(float64(p.Checks[m]), m, p.Name, p.Kind)
		}
	}
	type info struct {
		p *ProviderResult
		t *TargetResult
	}
	infos := make([]info, 0, n)
	for i, p := range ps {
		timeout.add(p.Budget.Seconds(), p.Name, p.Kind)
		abandoned.add(float64(p.Abandoned), p.Name, p.Kind)
		for _, t := range order[i] {
			upF.add(boolFloat(t.Reason.Up()), p.Name, p.Kind, t.Target.Name)
			readyF.add(boolFloat(t.Reason.Ready()), p.Name, p.Kind, t.Target.Name)
			durationF.add(t.Duration.Seconds(), p.Name, p.Kind, t.Target.Name)
			lastCheckF.add(unixSeconds(t.CheckedAt), p.Name, p.Kind, t.Target.Name)
			if !t.LastTransition.IsZero() {
				lastTransF.add(unixSeconds(t.LastTransition), p.Name, p.Kind, t.Target.Name)
			}
			infos = append(infos, info{p, t})
		}
		reasons := slices.Sorted(slices.Values(p.Reasons))
		for _, r := range reasons {
			for _, t := range order[i] {
				reasonF.add(boolFloat(r == t.Reason), p.Name, p.Kind, string(r), t.Target.Name)
			}
		}
	}
	slices.SortFunc(infos, func(a, b info) int {
		return cmp.Or(strings.Compare(a.t.Target.Address, b.t.Target.Address),
			strings.Compare(a.p.Name, b.p.Name), strings.Compare(a.p.Kind, b.p.Kind),
			strings.Compare(a.t.Target.Name, b.t.Target.Name))
	})
	for _, in := range infos {
		infoF.add(1, in.t.Target.Address, in.p.Name, in.p.Kind, in.t.Target.Name)
	}

	x := &Exposition{}
	for _, f := range []*family{timeout, checks, abandoned, upF, readyF, durationF, lastCheckF, lastTransF, reasonF, infoF} {
		if f.len() > 0 {
			x.fams = append(x.fams, f)
		}
	}
	facts, err := collectFacts(ps, order, x.fams)
	x.fams = append(x.fams, facts...)
	slices.SortFunc(x.fams, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	return x, err
}

// collectFacts gathers the providers' own metrics of every target, as a
// Registry does: grouped into families by name, each family sorted by its
// label values, inconsistent and duplicate metrics left out. A verdict's
// Facts are collected once (FactsMemo) and reused for as long as the
// verdict is served.
func collectFacts(ps []*ProviderResult, order [][]*TargetResult, framework []*family) ([]*family, error) {
	type job struct {
		name string
		t    *TargetResult
		ms   []*factMetric
	}
	var jobs []*job
	rows := make([][]*factMetric, 0, len(ps))
	var errs []error
	for i, p := range ps {
		for _, t := range order[i] {
			if t.Facts == nil {
				continue
			}
			if ms, ok, err := t.memo.load(p.Name, t.Target.Name); ok {
				rows = append(rows, ms)
				if err != nil {
					errs = append(errs, err)
				}
				continue
			}
			jobs = append(jobs, &job{name: p.Name, t: t})
		}
	}
	if len(jobs) > 0 {
		// Collect sends on a channel: one goroutine collects every target
		// whose metrics are not known yet, a nil marks each target's end.
		ch := make(chan prometheus.Metric, 256)
		go func() {
			defer close(ch)
			for _, j := range jobs {
				j.t.Facts.Collect(ch, j.name, j.t.Target.Name)
				ch <- nil
			}
		}()
		var batch []factMetric // allocated a few hundred at a time
		var dms []dto.Metric
		k := 0
		var jerrs []error
		for m := range ch {
			j := jobs[k]
			if m == nil {
				err := errors.Join(jerrs...)
				j.t.memo.store(j.name, j.t.Target.Name, j.ms, err)
				if err != nil {
					errs = append(errs, err)
				}
				rows = append(rows, j.ms)
				jerrs = nil
				k++
				continue
			}
			if len(batch) == 0 {
				batch, dms = make([]factMetric, 256), make([]dto.Metric, 256)
			}
			fm, dm := &batch[0], &dms[0]
			batch, dms = batch[1:], dms[1:]
			if err := m.Write(dm); err != nil {
				jerrs = append(jerrs, fmt.Errorf("collected metric %s: %w", m.Desc(), err))
				continue
			}
			fm.m, fm.desc, fm.dm = m, m.Desc(), dm
			fm.values = make([]string, len(dm.Label))
			for i, lp := range dm.Label {
				fm.values[i] = lp.GetValue()
				fm.labels = appendLabel(fm.labels, i, lp.GetName(), lp.GetValue())
			}
			if len(dm.Label) > 0 {
				fm.labels = append(fm.labels, '}')
			}
			j.ms = append(j.ms, fm)
		}
	}

	byDesc := map[*prometheus.Desc]*family{}
	byName := map[string]*family{}
	for _, f := range framework {
		byName[f.name] = f
	}
	var out []*family
	for _, ms := range rows {
		for _, fm := range ms {
			f, ok := byDesc[fm.desc]
			if !ok {
				// A Desc's name and help are not exported: a Registry with
				// this one metric says them, once per Desc and scrape.
				mf, err := describe(fm.m)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				f = byName[mf.GetName()]
				switch {
				case f == nil:
					f = &family{name: mf.GetName(), help: mf.GetHelp(), typ: mf.GetType(), rows: []*factMetric{}}
					byName[f.name] = f
					out = append(out, f)
				case f.rows == nil || f.help != mf.GetHelp() || f.typ != mf.GetType():
					errs = append(errs, fmt.Errorf("collected metric family %s is inconsistent with the family of that name already collected", mf.GetName()))
					continue
				}
				byDesc[fm.desc] = f
			}
			f.rows = append(f.rows, fm)
		}
	}
	for _, f := range out {
		if !slices.IsSortedFunc(f.rows, compareValues) {
			slices.SortFunc(f.rows, compareValues)
		}
		// Duplicates are neighbours once sorted.
		f.rows = slices.CompactFunc(f.rows, func(a, b *factMetric) bool {
			if compareValues(a, b) == 0 {
				errs = append(errs, fmt.Errorf("collected metric %s %v was collected before with the same name and label values", f.name, a.dm.GetLabel()))
				return true
			}
			return false
		})
	}
	return out, errors.Join(errs...)
}

// factMetric is one metric a Facts collected, written out once.
type factMetric struct {
	m      prometheus.Metric
	desc   *prometheus.Desc
	dm     *dto.Metric
	values []string // the label values in label name order: the sort key
	// labels is the metric's label set as the text formats write it
	// ({a="1",b="2"}, or nothing), written once when it is collected:
	// the metric is written again at every scrape that serves its verdict.
	labels []byte
}

// compareValues orders the metrics of one family as Gather does: by their
// label values in label name order.
func compareValues(a, b *factMetric) int {
	return slices.Compare(a.values, b.values)
}

// factsMemo keeps the metrics of one verdict's Facts, collected the first
// time the verdict is exported: a verdict reused within min_interval or
// during a backoff has the same Facts at every scrape (checker.go: Facts),
// and collecting them again would cost the provider's Collect and its
// allocations at every scrape.
type factsMemo struct {
	mu           sync.Mutex
	done         bool
	name, target string
	ms           []*factMetric
	err          error
}

func (m *factsMemo) load(name, target string) ([]*factMetric, bool, error) {
	if m == nil {
		return nil, false, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.done || m.name != name || m.target != target {
		return nil, false, nil
	}
	return m.ms, true, m.err
}

func (m *factsMemo) store(name, target string, ms []*factMetric, err error) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.done {
		m.done, m.name, m.target, m.ms, m.err = true, name, target, ms, err
	}
}

// oneMetric is a collector of a single metric, to have a Registry check it
// and describe its family.
type oneMetric struct{ m prometheus.Metric }

func (oneMetric) Describe(chan<- *prometheus.Desc)      {}
func (o oneMetric) Collect(ch chan<- prometheus.Metric) { ch <- o.m }

func describe(m prometheus.Metric) (*dto.MetricFamily, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(oneMetric{m}); err != nil {
		return nil, fmt.Errorf("describe %s: %w", m.Desc(), err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("collected metric: %w", err)
	}
	if len(mfs) != 1 {
		return nil, fmt.Errorf("collected metric %s: gathered %d families", m.Desc(), len(mfs))
	}
	return mfs[0], nil
}

// Write encodes the families in format, merged in name order with others
// (families gathered elsewhere, sorted by name: the exporter's own), as
// promhttp would write the Gather of both. keep, when not nil, selects
// the families written by name.
func (x *Exposition) Write(w io.Writer, format expfmt.Format, others []*dto.MetricFamily, keep func(name string) bool) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := expfmt.NewEncoder(bw, format)
	openMetrics, direct := directFormat(format)
	var errs []error
	i, j := 0, 0
	for i < len(x.fams) || j < len(others) {
		var f *family
		var mf *dto.MetricFamily
		if j == len(others) || (i < len(x.fams) && x.fams[i].name < others[j].GetName()) {
			f = x.fams[i]
			i++
		} else {
			mf = others[j]
			j++
		}
		name := mf.GetName()
		if f != nil {
			name = f.name
		}
		if keep != nil && !keep(name) {
			continue
		}
		var err error
		switch {
		case f != nil && direct && f.legacyNames():
			err = f.write(bw, openMetrics)
		case f != nil:
			err = enc.Encode(f.dto())
		default:
			err = enc.Encode(mf)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("encoding metric family %s: %w", name, err))
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("finishing the exposition: %w", err))
		}
	}
	if err := bw.Flush(); err != nil {
		errs = append(errs, fmt.Errorf("writing the exposition: %w", err))
	}
	return errors.Join(errs...)
}

// directFormat tells whether Write writes format itself: the text format
// and OpenMetrics 1.0.0 and 0.0.1, which expfmt writes alike but for the
// number format and the counter names.
func directFormat(format expfmt.Format) (openMetrics, ok bool) {
	switch format.FormatType() {
	case expfmt.TypeTextPlain:
		return false, true
	case expfmt.TypeOpenMetrics:
		_, params, err := mime.ParseMediaType(string(format))
		v := params["version"]
		return true, err == nil && (v == expfmt.OpenMetricsVersion_1_0_0 || v == expfmt.OpenMetricsVersion_0_0_1)
	}
	return false, false
}

// legacyNames tells whether the family's names need no quoting or
// escaping in any format (always true of the framework's own), which is
// what writing it without expfmt assumes.
func (f *family) legacyNames() bool {
	if !model.LegacyValidation.IsValidMetricName(f.name) {
		return false
	}
	if f.rows == nil {
		return true // the framework's label names
	}
	switch f.typ {
	case dto.MetricType_GAUGE, dto.MetricType_COUNTER, dto.MetricType_UNTYPED:
	default:
		return false
	}
	// The metrics of one Desc share its label names: those are checked
	// once per Desc, not once per metric (a family has one Desc per
	// provider, and a metric per target).
	var checked *prometheus.Desc
	for _, r := range f.rows {
		m := r.dm
		if m.TimestampMs != nil || (m.Counter != nil && m.Counter.Exemplar != nil) {
			return false
		}
		if r.desc == checked {
			continue
		}
		for _, lp := range m.Label {
			if !model.LegacyValidation.IsValidLabelName(lp.GetName()) {
				return false
			}
		}
		checked = r.desc
	}
	return true
}

// write writes the family as expfmt.MetricFamilyToText (openMetrics
// false) or expfmt.MetricFamilyToOpenMetrics would.
func (f *family) write(w *bufio.Writer, openMetrics bool) error {
	name, sample := f.name, f.name
	typ := ""
	switch f.typ {
	case dto.MetricType_GAUGE:
		typ = "gauge"
	case dto.MetricType_COUNTER:
		typ = "counter"
		if openMetrics {
			if base, ok := strings.CutSuffix(f.name, "_total"); ok {
				name = base
			} else {
				typ = "unknown"
			}
		}
	case dto.MetricType_UNTYPED:
		typ = "untyped"
		if openMetrics {
			typ = "unknown"
		}
	}
	b := w.AvailableBuffer()
	b = append(b, "# HELP "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = appendEscaped(b, f.help, openMetrics)
	b = append(b, "\n# TYPE "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, typ...)
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return err
	}
	for i := range f.len() {
		b = w.AvailableBuffer()
		b = append(b, sample...)
		var v float64
		if f.rows != nil {
			m := f.rows[i].dm
			b = append(b, f.rows[i].labels...)
			switch {
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Untyped != nil:
				v = m.Untyped.GetValue()
			}
		} else {
			k := len(f.labels)
			for l, lv := range f.values[i*k : (i+1)*k] {
				b = appendLabel(b, l, f.labels[l], lv)
			}
			if k > 0 {
				b = append(b, '}')
			}
			v = f.nums[i]
		}
		b = append(b, ' ')
		b = appendFloat(b, v, openMetrics)
		b = append(b, '\n')
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func appendLabel(b []byte, i int, name, value string) []byte {
	if i == 0 {
		b = append(b, '{')
	} else {
		b = append(b, ',')
	}
	b = append(b, name...)
	b = append(b, '=', '"')
	b = appendEscaped(b, value, true)
	return append(b, '"')
}

// appendEscaped escapes as expfmt does: backslash and newline, and the
// double quote in label values and OpenMetrics help.
func appendEscaped(b []byte, s string, quote bool) []byte {
	clean := true
	for i := range len(s) {
		if c := s[i]; c == '\\' || c == '\n' || (c == '"' && quote) {
			clean = false
			break
		}
	}
	if clean {
		return append(b, s...)
	}
	for i := range len(s) {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, '\\', '\\')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '"' && quote:
			b = append(b, '\\', '"')
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendFloat formats as expfmt's writeFloat, or writeOpenMetricsFloat.
func appendFloat(b []byte, f float64, openMetrics bool) []byte {
	switch {
	case f == 0 && openMetrics: // -0 included, as expfmt has it
		return append(b, "0.0"...)
	case f == 0:
		return append(b, '0')
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, +1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, 'g', -1, 64)
	if openMetrics && !bytes.ContainsAny(b[start:], "e.") {
		b = append(b, '.', '0')
	}
	return b
}

// dto returns the family as client_model has it, for the formats expfmt
// writes.
func (f *family) dto() *dto.MetricFamily {
	mf := &dto.MetricFamily{Name: &f.name, Help: &f.help, Type: &f.typ}
	if f.rows != nil {
		mf.Metric = make([]*dto.Metric, len(f.rows))
		for i, r := range f.rows {
			mf.Metric[i] = r.dm
		}
		return mf
	}
	n, k := len(f.nums), len(f.labels)
	ms := make([]dto.Metric, n)
	pairs := make([]dto.LabelPair, n*k)
	ptrs := make([]*dto.LabelPair, n*k)
	var gauges []dto.Gauge
	var counters []dto.Counter
	if f.typ == dto.MetricType_COUNTER {
		counters = make([]dto.Counter, n)
	} else {
		gauges = make([]dto.Gauge, n)
	}
	mf.Metric = make([]*dto.Metric, n)
	for i := range n {
		for l := range k {
			p := &pairs[i*k+l]
			p.Name, p.Value = &f.labels[l], &f.values[i*k+l]
			ptrs[i*k+l] = p
		}
		m := &ms[i]
		m.Label = ptrs[i*k : (i+1)*k : (i+1)*k]
		if counters != nil {
			counters[i].Value = &f.nums[i]
			m.Counter = &counters[i]
		} else {
			gauges[i].Value = &f.nums[i]
			m.Gauge = &gauges[i]
		}
		mf.Metric[i] = m
	}
	return mf
}

package exposition

// The metrics of the verdicts' Facts: collected once per verdict
// (FactsMemo), a panic in a kind's Collect turned into an Unknown verdict,
// and grouped into families checked as a prometheus.Registry checks them.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// gatherFacts collects the providers' own metrics of every target. A
// verdict's Facts are collected once (FactsMemo) and reused for as long as
// the verdict is served. A target whose Facts panicked while collected
// becomes Unknown with the panic's text, without facts.
func gatherFacts(ps []*Results, order [][]*Series) (rows [][]*factMetric, errs []error) {
	var jobs []*factJob
	rows = make([][]*factMetric, 0, len(ps))
	for i, p := range ps {
		for _, t := range order[i] {
			if t.Facts == nil {
				continue
			}
			if ms, ok, panicked, err := t.Memo.load(p.Name, t.Target.Name); ok {
				if panicked != "" {
					t.Verdict = PanicVerdict(t.Verdict, "building the metrics of the verdict", panicked)
					continue
				}
				rows = append(rows, ms)
				if err != nil {
					errs = append(errs, err)
				}
				continue
			}
			jobs = append(jobs, &factJob{name: p.Name, t: t})
		}
	}
	if len(jobs) > 0 {
		jrows, jerrs := collectJobs(jobs)
		rows = append(rows, jrows...)
		errs = append(errs, jerrs...)
		for _, j := range jobs {
			if j.panic != "" {
				j.t.Verdict = PanicVerdict(j.t.Verdict, "building the metrics of the verdict", j.panic)
				errs = append(errs, fmt.Errorf("collecting the metrics of target %q of %q panicked: %s", j.t.Target.Name, j.name, j.panic))
			}
		}
	}
	return rows, errs
}

// groupFacts groups the providers' metrics into families by name, as a
// Registry does: each family sorted by its label values, inconsistent and
// duplicate metrics left out.
func groupFacts(rows [][]*factMetric, errs []error, framework []*family) ([]*family, error) {
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
	return out, boundedJoin(errs)
}

// maxErrors is how many of a scrape's metric errors its error names; the
// rest are counted. Each is cut (BoundString): an error can quote a label
// value a provider sent, and a scrape can have one per target.
const maxErrors = 10

func boundedJoin(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	kept := make([]error, 0, min(len(errs), maxErrors)+1)
	for _, err := range errs[:min(len(errs), maxErrors)] {
		kept = append(kept, errors.New(provider.BoundString(err.Error())))
	}
	if len(errs) > maxErrors {
		kept = append(kept, fmt.Errorf("and %d more", len(errs)-maxErrors))
	}
	return errors.Join(kept...)
}

// factJob is a target whose Facts' metrics are not known yet.
type factJob struct {
	name string
	t    *Series
	ms   []*factMetric
	// panic is the text of a panic in the Facts' Collect; its metrics are
	// then dropped.
	panic string
}

// CollectFacts collects the metrics of a fresh verdict's Facts into memo,
// where New finds them: the engine calls it in the check's own goroutine,
// so that a Collect that panics turns the verdict into Unknown for the
// status page and every scrape alike. It returns the panic's text, or "".
func CollectFacts(memo *FactsMemo, name, target string, v provider.Verdict) (panicked string) {
	job := &factJob{name: name, t: &Series{Result: Result{Verdict: v, Target: provider.Target{Name: target}}, Memo: memo}}
	collectJobs([]*factJob{job})
	return job.panic
}

// collectOne sends j's metrics, then the nil that ends them; a panic in
// Collect is kept in j.panic.
func collectOne(ch chan<- prometheus.Metric, j *factJob) {
	defer func() {
		if rec := recover(); rec != nil {
			j.panic = provider.BoundString(fmt.Sprint(rec))
		}
		ch <- nil
	}()
	j.t.Facts.Collect(ch, j.name, j.t.Target.Name)
}

// collectJobs collects the metrics of the jobs' Facts and remembers them
// in each verdict's memo: one row of metrics a job.
func collectJobs(jobs []*factJob) (rows [][]*factMetric, errs []error) {
	// Collect sends on a channel: one goroutine collects every target
	// whose metrics are not known yet, a nil marks each target's end. The
	// buffer is sized as the batches below: a check settles its one
	// target here, and a 256-slot channel per check was most of what a
	// cold start's first checks allocated here.
	ch := make(chan prometheus.Metric, min(256, 16*len(jobs)))
	go func() {
		defer close(ch)
		for _, j := range jobs {
			collectOne(ch, j)
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
			if j.panic != "" {
				// What was sent before the panic is not the whole.
				j.ms, err = nil, nil
			}
			j.t.Memo.store(j.name, j.t.Target.Name, j.ms, err, j.panic)
			if err != nil {
				errs = append(errs, err)
			}
			rows = append(rows, j.ms)
			jerrs = nil
			k++
			continue
		}
		if len(batch) == 0 {
			// A few hundred at a time across targets, but no more than
			// the jobs left can use: the metrics keep their batch alive
			// for as long as their verdict is served, and a check collects
			// its one target alone (CollectFacts).
			n := min(256, 16*(len(jobs)-k))
			batch, dms = make([]factMetric, n), make([]dto.Metric, n)
		}
		fm, dm := &batch[0], &dms[0]
		batch, dms = batch[1:], dms[1:]
		if err := m.Write(dm); err != nil {
			jerrs = append(jerrs, fmt.Errorf("collected metric %s: %w", m.Desc(), err))
			continue
		}
		fm.m, fm.desc, fm.dm = m, m.Desc(), dm
		fm.key = sortKey(dm.Label)
		for i, lp := range dm.Label {
			fm.labels = appendLabel(fm.labels, i, lp.GetName(), lp.GetValue())
		}
		if len(dm.Label) > 0 {
			fm.labels = append(fm.labels, '}')
		}
		j.ms = append(j.ms, fm)
	}
	return rows, errs
}

// factMetric is one metric a Facts collected, written out once.
type factMetric struct {
	m    prometheus.Metric
	desc *prometheus.Desc
	dm   *dto.Metric
	key  string // the label values in label name order, as sortKey makes them
	// labels is the metric's label set as the text formats write it
	// ({a="1",b="2"}, or nothing), written once when it is collected:
	// the metric is written again at every scrape that serves its verdict.
	labels []byte
}

// compareValues orders the metrics of one family as Gather does: by their
// label values in label name order. Sorting kvm_pool_state's series, whose
// state label comes before the target's, is done at every scrape, and
// comparing the values one string at a time took about a tenth of a
// 1,000-host steady scrape's CPU: the values are compared as one key, made
// once per collected metric (docs/scaling.md: "Performance").
func compareValues(a, b *factMetric) int { return strings.Compare(a.key, b.key) }

// sortKey joins label values into one string that compares as the list of
// values does (shorter first when one is a prefix of the other): the
// values are separated by "\x00\x00", and a NUL inside a value is written
// "\x00\x01", which sorts after the separator and before any other byte,
// so the join is both one-to-one and order-preserving.
func sortKey(labels []*dto.LabelPair) string {
	n := 0
	for _, lp := range labels {
		n += len(lp.GetValue()) + 2
	}
	b := make([]byte, 0, n)
	for i, lp := range labels {
		if i > 0 {
			b = append(b, 0, 0)
		}
		v := lp.GetValue()
		for {
			j := strings.IndexByte(v, 0)
			if j < 0 {
				break
			}
			b = append(append(b, v[:j]...), 0, 1)
			v = v[j+1:]
		}
		b = append(b, v...)
	}
	return string(b)
}

// FactsMemo keeps the metrics of one verdict's Facts, collected the first
// time the verdict is exported: a verdict reused within min_interval or
// during a backoff has the same Facts at every scrape (provider.Facts),
// and collecting them again would cost the provider's Collect and its
// allocations at every scrape.
type FactsMemo struct {
	mu           sync.Mutex
	done         bool
	name, target string
	ms           []*factMetric
	err          error
	panicked     string // the text of a panic in Collect
}

func (m *FactsMemo) load(name, target string) (ms []*factMetric, ok bool, panicked string, err error) {
	if m == nil {
		return nil, false, "", nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.done || m.name != name || m.target != target {
		return nil, false, "", nil
	}
	return m.ms, true, m.panicked, m.err
}

func (m *FactsMemo) store(name, target string, ms []*factMetric, err error, panicked string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.done {
		m.done, m.name, m.target, m.ms, m.err, m.panicked = true, name, target, ms, err, panicked
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

// PanicVerdict is the Unknown verdict of a target for which what stage
// panicked with text, naming the verdict it replaces.
func PanicVerdict(v provider.Verdict, stage, text string) provider.Verdict {
	return provider.Verdict{
		Reason:  provider.ReasonUnknown,
		Message: provider.BoundString(fmt.Sprintf("%s panicked: %s (the check said %s: %s)", stage, text, v.Reason, v.Message)),
		Address: v.Address,
	}
}

package engine

import (
	"slices"
	"time"

	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// historySize is how many transitions the status page shows per target.
const historySize = 10

// Transition is a change of a target's reason.
type Transition struct {
	Time     time.Time
	From, To provider.Reason // From is "" for the first verdict
}

// Status returns the last verdict of every selected target without
// checking anything: what the status page shows.
func (e *Engine) Status(name string) ([]ProviderResult, error) {
	ps, err := e.selectProviders(Request{Name: name})
	if err != nil {
		return nil, err
	}
	out := make([]ProviderResult, len(ps))
	for i, p := range ps {
		out[i] = p.result(0)
		// Every target, in order: the j-th is p's j-th.
		for j, t := range targetsOf(p, "") {
			tr := TargetResult{Series: exposition.Series{Result: exposition.Result{Target: t}}}
			if st := p.states.peek(j); st != nil {
				st.mu.Lock()
				tr.LastTransition, tr.Transitions = st.transition, slices.Clone(st.history)
				if st.last != nil {
					tr.Result, tr.Checked = *st.last, true
					tr.Target = t
				}
				st.mu.Unlock()
			}
			if b, ok := p.checker.(provider.Backoffer); ok && tr.Checked {
				if until := b.NotBefore(t.Name); time.Now().Before(until) {
					tr.BackoffUntil = until
				}
			}
			out[i].Targets = append(out[i].Targets, p.withFacts(tr))
		}
	}
	return out, nil
}

// withFacts gives a verdict without facts (made up, or none yet) those the
// checker keeps, if it keeps any.
func (p *loaded) withFacts(tr TargetResult) TargetResult {
	if tr.Facts == nil {
		if k, ok := p.checker.(provider.FactKeeper); ok {
			// Kept facts change from scrape to scrape: not the verdict's.
			tr.Facts, tr.Memo = keptFacts(k, tr.Target.Name), nil
		}
	}
	return tr
}

// record keeps the newest verdict of a target, when ready last changed and
// the recent changes of its reason. A provisional verdict gives way to the
// check's own whenever that arrives.
func record(st *state, res exposition.Result, provisional bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.last != nil && res.CheckedAt.Before(st.last.CheckedAt) && (provisional || !st.provisional) {
		return
	}
	var from provider.Reason
	if st.last != nil {
		from = st.last.Reason
	}
	if st.last == nil || st.last.Reason.Ready() != res.Reason.Ready() {
		st.transition = res.CheckedAt
	}
	if st.last == nil || from != res.Reason {
		st.history = append(st.history, Transition{Time: res.CheckedAt, From: from, To: res.Reason})
		if len(st.history) > historySize {
			st.history = slices.Delete(st.history, 0, len(st.history)-historySize)
		}
	}
	st.last, st.provisional = &res, provisional
}

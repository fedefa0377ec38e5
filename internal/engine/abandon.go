package engine

import (
	"fmt"
	"time"

	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// overdue tells whether check c, still running, is past its deadline
// plus AbandonGrace.
func overdue(c *call, now time.Time) bool {
	return !now.Before(c.deadline.Add(provider.AbandonGrace))
}

// abandonLocked gives up on the target's in-flight check c, which is
// overdue: the next caller starts a fresh check. It is counted and
// logged once, here. The caller holds st.mu.
func (e *Engine) abandonLocked(p *loaded, st *state, c *call) {
	st.inflight = nil
	c.abandoned = true
	st.abandoned++
	p.checks.abandoned.Add(1)
	e.logger.Warn("check abandoned: it did not return by its deadline plus the grace",
		"provider", p.Kind, "name", p.Name, "deadline", c.deadline, "grace", provider.AbandonGrace,
		"still_running", st.abandoned)
}

// stuck is the verdict of a target whose abandoned checks, n of them,
// have not returned: no new check starts until one does.
func (e *Engine) stuck(p *loaded, st *state, t provider.Target, n int) TargetResult {
	res := exposition.Result{
		Verdict: provider.Verdict{Reason: provider.ReasonTimeout, Message: fmt.Sprintf(
			"%d abandoned checks of this target have not returned; no new check starts until one does", n)},
		Target:    t,
		CheckedAt: time.Now(),
	}
	// No check ran: checks_total is not counted.
	record(st, res, true)
	return p.withFacts(e.answer(st, res, exposition.ModeLive, nil, nil))
}

// reuse returns the target's last verdict when it is to be served
// without a check: younger than min_interval, or the target is held back
// by its checker and no check of it is in flight.
func (e *Engine) reuse(p *loaded, st *state, t provider.Target) (TargetResult, bool) {
	st.mu.Lock()
	tr, ok := reuseLocked(p, st, t)
	st.mu.Unlock()
	if !ok {
		return TargetResult{}, false
	}
	return e.served(p, tr), true
}

// reuseLocked is reuse under the target's lock, held by the caller, and
// without counting: join decides under that one lock whether a verdict is
// reused, a check joined or one started, so that a check which ends in
// between cannot make it start a second one of a target whose verdict is
// now fresh.
func reuseLocked(p *loaded, st *state, t provider.Target) (TargetResult, bool) {
	mode := ""
	switch {
	case st.cached != nil && p.MinInterval > 0 && time.Since(st.cached.CheckedAt) < p.MinInterval:
		mode = exposition.ModeCached
	case st.cached != nil && st.inflight == nil && backingOff(p.checker, t.Name):
		mode = exposition.ModeBackoff
	default:
		return TargetResult{}, false
	}
	tr := TargetResult{Series: exposition.Series{Result: *st.cached, LastTransition: st.transition, Memo: st.cachedMemo}, Checked: true, Mode: mode, Log: st.cachedLog}
	tr.Target = t
	return tr, true
}

// served counts and completes a reused verdict.
func (e *Engine) served(p *loaded, tr TargetResult) TargetResult {
	e.count(p, tr.Mode)
	return p.withFacts(tr)
}

// backingOff tells whether c holds back the live checks of target now.
func backingOff(c provider.Checker, target string) bool {
	b, ok := c.(provider.Backoffer)
	return ok && time.Now().Before(b.NotBefore(target))
}

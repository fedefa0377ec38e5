package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"slices"
	"time"

	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/internal/redact"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Request selects what Run checks and under which budget.
type Request struct {
	Name   string // one provider entry; "" = all
	Target string // one target of that entry; "" = all
	// Kinds, when not nil, keeps only the providers of these kinds (with
	// Name ""); an empty map keeps none.
	Kinds map[string]bool
	// ScrapeTimeout is the scrape's own timeout (0 = none) and Offset the
	// safety margin subtracted from it (see Budget).
	ScrapeTimeout time.Duration
	Offset        time.Duration
	// Reserve is the time the caller needs after Run returns to build
	// and write its answer (a measured estimate): Run and the checks end
	// that much before the budget does, at most a quarter of it earlier,
	// and ProviderResult.Budget is what is left.
	Reserve time.Duration
}

// ProviderResult is what Run or Status says of one provider entry.
type ProviderResult struct {
	// Provider is what the exposition says of the entry: its kind,
	// name, reason set, budget and check counts.
	exposition.Provider
	Targets []TargetResult
}

// TargetResult is a target's verdict as seen by one caller.
type TargetResult struct {
	// Series is what the exposition reads of the target: the verdict,
	// when ready last changed, the collected metrics of its Facts.
	exposition.Series
	Checked bool // false until the target's first verdict
	Mode    string
	// Log is the debug log of the check that produced the verdict; nil
	// for a verdict the engine made up.
	Log         *CheckLog
	Transitions []Transition // oldest first; Status only
	// BackoffUntil is when a target held back by its checker (Backoffer)
	// will be checked again; zero when it is not held back. Status only.
	BackoffUntil time.Time
}

// NewExposition is the metric families of results (exposition.New). A
// target whose Facts panic while collected is turned into Unknown, in
// results too.
func NewExposition(results []ProviderResult) (*exposition.Exposition, error) {
	in := make([]exposition.Results, len(results))
	for i := range results {
		p := &results[i]
		ts := make([]*exposition.Series, len(p.Targets))
		for j := range p.Targets {
			ts[j] = &p.Targets[j].Series
		}
		in[i] = exposition.Results{Provider: &p.Provider, Targets: ts}
	}
	return exposition.New(in)
}

// LookupError says that a Request names no configured provider or target.
type LookupError struct{ msg string }

func (e *LookupError) Error() string { return e.msg }

func (e *Engine) selectProviders(req Request) ([]*loaded, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if req.Name == "" {
		if req.Target != "" {
			return nil, &LookupError{"target given without name"}
		}
		var out []*loaded
		for _, p := range e.list {
			if req.Kinds == nil || req.Kinds[p.Kind] {
				out = append(out, p)
			}
		}
		return out, nil
	}
	p := e.byName[req.Name]
	if p == nil {
		return nil, &LookupError{"unknown name " + provider.Echo(req.Name)}
	}
	if req.Target != "" && p.states.index(req.Target) < 0 {
		return nil, &LookupError{fmt.Sprintf("unknown target %s of %s %q", provider.Echo(req.Target), p.Kind, p.Name)}
	}
	return []*loaded{p}, nil
}

// targetsOf lists the selected targets of p: those of the loaded
// configuration, never a call into the checker, so that neither a scrape
// nor the status page waits on a provider's lock (docs/configuration.md: "Timeouts"). A
// target's address is the configured one until a check reports where it
// found the target (Verdict.Address: a kubeconfig's server).
func targetsOf(p *loaded, only string) []provider.Target {
	var out []provider.Target
	for i, t := range p.targets {
		if only != "" && t.Name != only {
			continue
		}
		if st := p.states.peek(i); st != nil {
			st.mu.Lock()
			if st.address != "" {
				t.Address = st.address
			}
			st.mu.Unlock()
		}
		out = append(out, t)
	}
	return out
}

func (p *loaded) result(budget time.Duration) ProviderResult {
	pr := ProviderResult{Provider: exposition.Provider{Kind: p.Kind, Name: p.Name, Reasons: p.Reasons, Budget: budget, Checks: map[string]uint64{}}}
	for i, m := range exposition.Modes {
		pr.Checks[m] = p.checks.modes[i].Load()
	}
	pr.Abandoned = p.checks.abandoned.Load()
	return pr
}

// Run checks the selected targets concurrently and returns one result per
// target, in configuration order. Each provider gets its Budget from its
// timeout and the request's scrape timeout, less the request's Reserve;
// Run returns when every target has a verdict or that budget is spent,
// even if a checker never returns. A verdict reused within min_interval
// or during a backoff costs no goroutine.
func (e *Engine) Run(ctx context.Context, req Request) ([]ProviderResult, error) {
	ps, err := e.selectProviders(req)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	out := make([]ProviderResult, len(ps))
	// Every check is started (or joined) first, then waited for here, in
	// turn: a goroutine per target only to wait for its check cost a
	// tenth of a 1,000-host steady scrape's CPU (docs/scaling.md:
	// "Performance"). Each wait ends with the provider's deadline at the
	// latest, so the waits in turn end as early as concurrent ones.
	type waiting struct {
		i, j int
		ctx  context.Context
		st   *state
		t    provider.Target
		c    *call
		mode string
	}
	var waits []waiting
	for i, p := range ps {
		budget := Budget(p.Timeout, req.ScrapeTimeout, req.Offset)
		budget -= reserve(req.Reserve, budget)
		out[i] = ProviderResult{Provider: exposition.Provider{Kind: p.Kind, Name: p.Name, Reasons: p.Reasons, Budget: budget}}
		targets := targetsOf(p, req.Target)
		out[i].Targets = make([]TargetResult, len(targets))
		// One deadline for all the provider's targets: a context per
		// target costs a timer per target.
		var pctx context.Context
		for j, t := range targets {
			st := p.states.of(t.Name)
			if tr, ok := e.reuse(p, st, t); ok {
				out[i].Targets[j] = tr
				continue
			}
			if pctx == nil {
				var cancel context.CancelFunc
				pctx, cancel = context.WithDeadline(ctx, start.Add(budget))
				defer cancel()
			}
			tr, c, mode, ok := e.join(pctx, p, st, t)
			if ok {
				out[i].Targets[j] = tr
				continue
			}
			waits = append(waits, waiting{i: i, j: j, ctx: pctx, st: st, t: t, c: c, mode: mode})
		}
	}
	for _, w := range waits {
		p := ps[w.i]
		tr, again := e.await(w.ctx, p, w.st, w.t, w.c, w.mode)
		if again {
			tr = e.checkTarget(w.ctx, p, w.t)
		}
		out[w.i].Targets[w.j] = tr
	}
	for i, p := range ps {
		r := p.result(0)
		out[i].Checks, out[i].Abandoned = r.Checks, r.Abandoned
	}
	return out, nil
}

// reserve is the part of budget a request keeps for building and writing
// its answer after Run: at most a quarter of the budget, so that a slow
// answer cannot starve the checks, rounded up to a millisecond so that
// check_timeout_seconds stays readable.
func reserve(want, budget time.Duration) time.Duration {
	r := min(want, budget/4)
	if r <= 0 {
		return 0
	}
	return min((r + time.Millisecond - 1).Truncate(time.Millisecond), budget/4)
}

func (e *Engine) count(p *loaded, mode string) {
	p.checks.modes[slices.Index(exposition.Modes, mode)].Add(1)
}

// checkTarget gets a verdict for one caller: the cached one within
// min_interval, else the one live check of the target, joined or started.
// A caller that joined a check with a shorter budget than its own, which
// then timed out, waits no longer than that check and starts its own.
func (e *Engine) checkTarget(ctx context.Context, p *loaded, t provider.Target) TargetResult {
	st := p.states.of(t.Name)
	for {
		tr, c, mode, ok := e.join(ctx, p, st, t)
		if ok {
			return tr
		}
		if tr, again := e.await(ctx, p, st, t, c, mode); !again {
			return tr
		}
	}
}

// join returns the verdict of the target when it needs no check (ok): the
// cached one, or a made-up one for a target whose checks are stuck. Else it
// returns the one live check of the target, joined (ModeShared) or started
// (ModeLive), for await.
func (e *Engine) join(ctx context.Context, p *loaded, st *state, t provider.Target) (TargetResult, *call, string, bool) {
	st.mu.Lock()
	if tr, ok := reuseLocked(p, st, t); ok {
		st.mu.Unlock()
		return e.served(p, tr), nil, "", true
	}
	c, mode := st.inflight, exposition.ModeShared
	if c != nil && overdue(c, time.Now()) {
		e.abandonLocked(p, st, c)
		c = nil
	}
	if c == nil {
		if st.abandoned >= provider.MaxAbandoned {
			n := st.abandoned
			st.mu.Unlock()
			return e.stuck(p, st, t, n), nil, "", true
		}
		c, mode = e.start(ctx, p, st, t), exposition.ModeLive
		st.inflight = c
	}
	st.mu.Unlock()
	return TargetResult{}, c, mode, false
}

// await waits for c, the check join returned, until ctx ends, and returns
// the caller's verdict. again tells that c was a joined check with a
// shorter budget than the caller's that timed out: the caller joins or
// starts another.
func (e *Engine) await(ctx context.Context, p *loaded, st *state, t provider.Target, c *call, mode string) (tr TargetResult, again bool) {
	select {
	case <-c.done:
		if mode == exposition.ModeShared && c.res.Reason == provider.ReasonTimeout && ctx.Err() == nil && c.deadline.Before(checkDeadline(ctx, 0)) {
			return TargetResult{}, true // its budget was shorter than ours
		}
		e.count(p, mode)
		return p.withFacts(e.answer(st, c.res, mode, c.log, c.memo)), false
	case <-ctx.Done():
	}
	select {
	case <-c.done:
		// The check ended at the same moment: its verdict (already
		// Timeout unless it was Ready) says more.
		e.count(p, mode)
		return p.withFacts(e.answer(st, c.res, mode, c.log, c.memo)), false
	default:
	}
	// The check did not answer in time; this caller answers anyway.
	now := time.Now()
	msg := fmt.Sprintf("no verdict within the budget: %v", context.Cause(ctx))
	if !now.Before(c.deadline) {
		msg = fmt.Sprintf("the check did not return by its deadline (%v); it is abandoned %v after it", context.Cause(ctx), provider.AbandonGrace)
	}
	res := exposition.Result{
		Verdict:   provider.Verdict{Reason: provider.ReasonTimeout, Message: msg},
		Target:    t,
		CheckedAt: now,
	}
	// Only a check that overran its own deadline (a stuck checker) is
	// recorded, provisionally: a caller that went away must not make
	// ready flap, and the check's own verdict replaces this one.
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && !now.Before(c.deadline) {
		record(st, res, true)
	}
	e.count(p, mode)
	return p.withFacts(e.answer(st, res, mode, nil, nil)), false
}

func (e *Engine) answer(st *state, res exposition.Result, mode string, log *CheckLog, memo *exposition.FactsMemo) TargetResult {
	st.mu.Lock()
	defer st.mu.Unlock()
	return TargetResult{Series: exposition.Series{Result: res, LastTransition: st.transition, Memo: memo}, Checked: true, Mode: mode, Log: log}
}

// checkDeadline is the deadline a check started for a caller gets: a little
// before the caller's own, so that a check which honours its context hands
// its own verdict (its message, its facts, its log) to the caller instead
// of losing the race against the caller's made-up Timeout.
func checkDeadline(ctx context.Context, fallback time.Duration) time.Time {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(fallback)
	}
	grace := min(time.Until(deadline)/10, 100*time.Millisecond)
	return deadline.Add(-max(grace, 0))
}

// start runs the live check of a target in its own goroutine. The check
// keeps the caller's deadline (less a grace) but not its cancellation:
// callers that joined it must not see it cancelled because the first
// caller went away. Its debug log is kept for /probe?debug=true.
func (e *Engine) start(ctx context.Context, p *loaded, st *state, t provider.Target) *call {
	c := &call{done: make(chan struct{}), deadline: checkDeadline(ctx, p.Timeout), log: &CheckLog{}, memo: &exposition.FactsMemo{}}
	if st.logHandler == nil {
		st.logHandler = e.logger.Handler().WithAttrs([]slog.Attr{
			slog.String("provider", p.Kind), slog.String("name", p.Name), slog.String("target", t.Name)})
	}
	main := st.logHandler
	go func() {
		defer close(c.done)
		h := c.log.handler(main, "provider", p.Kind, "name", p.Name, "target", t.Name)
		logger := slog.New(h)
		cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), c.deadline)
		defer cancel()
		begin := time.Now()
		v := safeCheck(cctx, p.checker, t, logger)
		end := time.Now()
		// A verdict that arrives after the deadline is Timeout, whatever
		// it says and for every kind, Ready included: a check cut short may
		// have counted with code that stopped quietly at the done context
		// (the kubernetes fit's scheduler plugins count nothing then), and
		// min_interval must not keep such a verdict (docs/configuration.md:
		// "Timeouts").
		if v.Reason != provider.ReasonTimeout && provider.Ended(cctx) {
			v.Message = fmt.Sprintf("deadline reached (%s: %s)", v.Reason, v.Message)
			v.Reason = provider.ReasonTimeout
		}
		if !p.Reasons.Contains(v.Reason) {
			logger.Error("checker returned a reason outside its set", "reason", v.Reason, "message", v.Message)
			v = provider.Verdict{Reason: provider.ReasonUnknown, Message: fmt.Sprintf("invalid reason %q: %s", provider.BoundString(string(v.Reason)), v.Message)}
		}
		// The one place every kind's message passes (docs/security.md:
		// "Strings, labels and pages").
		v.Message = provider.BoundString(v.Message)
		var capErr string
		if v.Capacity, capErr = settleCapacity(v.Capacity, v.Reason); capErr != "" {
			logger.Error("checker returned a capacity its verdict contradicts", "reason", v.Reason, "problem", capErr)
		}
		var domErr string
		if v.Domains, domErr = settleDomains(v.Domains, v.Reason); domErr != "" {
			logger.Error("checker returned domains the engine cannot export", "reason", v.Reason, "problem", domErr)
		}
		st.mu.Lock()
		prev := st.cached
		st.mu.Unlock()
		if prev == nil || !sameFacts(prev.Facts, v.Facts) {
			v = settleFacts(v, c.memo, p.Name, t.Name, logger)
		}
		if v.Address != "" {
			v.Address = redact.URL(v.Address)
			t.Address = v.Address
			st.mu.Lock()
			st.address = v.Address
			st.mu.Unlock()
		}
		res := exposition.Result{Verdict: v, Target: t, CheckedAt: end, Duration: end.Sub(begin)}
		// A verdict is logged at info when the reason changes, so a target
		// that stays broken does not fill the log at every scrape.
		level := slog.LevelDebug
		if prev == nil || prev.Reason != v.Reason {
			level = slog.LevelInfo
		}
		h.log(cctx, level, "check done", "reason", v.Reason, "message", v.Message, "duration_seconds", res.Duration.Seconds())
		c.log.close()
		c.res = res
		st.mu.Lock()
		if c.abandoned {
			// A fresh check may have run since: this late verdict is not
			// the target's.
			st.abandoned--
			st.mu.Unlock()
			logger.Info("abandoned check returned", "reason", v.Reason)
			return
		}
		if st.inflight == c {
			st.inflight = nil
		}
		// A check that found what the last one found returns the same
		// Facts (provider.Facts): their metrics are not collected again.
		if st.cached != nil && sameFacts(st.cached.Facts, v.Facts) {
			c.memo = st.cachedMemo
		}
		st.cached, st.cachedLog, st.cachedMemo = &c.res, c.log, c.memo
		st.mu.Unlock()
		record(st, res, false)
	}()
	return c
}

// sameFacts tells whether b are the Facts a, which a checker says by
// returning the same pointer again. Values are not compared: comparing
// interfaces can panic, and an equal value says nothing a pointer
// would not.
func sameFacts(a, b provider.Facts) bool {
	return a != nil && reflect.TypeOf(a).Kind() == reflect.Pointer && a == b
}

func safeCheck(ctx context.Context, c provider.Checker, t provider.Target, logger *slog.Logger) (v provider.Verdict) {
	defer func() {
		if rec := recover(); rec != nil {
			text := provider.BoundString(fmt.Sprint(rec))
			logger.Error("checker panicked", "panic", text, "stack", string(debug.Stack()))
			v = provider.Verdict{Reason: provider.ReasonUnknown, Message: "checker panicked: " + text}
		}
	}()
	return c.Check(ctx, logger, t.Name)
}

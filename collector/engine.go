package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Check modes, the mode label of provider_health_exporter_checks_total.
const (
	ModeLive   = "live"   // the check ran for this caller
	ModeShared = "shared" // joined a check another caller had started
	ModeCached = "cached" // reused a verdict younger than min_interval
	// ModeBackoff served the last verdict of a target the checker holds
	// back after repeated failures (Backoffer).
	ModeBackoff = "backoff"
)

// Modes lists the check modes in a stable order.
var Modes = []string{ModeLive, ModeShared, ModeCached, ModeBackoff}

// historySize is how many transitions the status page shows per target.
const historySize = 10

// A check that has not returned by its deadline plus AbandonGrace is
// abandoned (docs/configuration.md: "Timeouts"): the engine stops waiting for it, the
// target's next scrape starts a fresh check, and the abandoned one is left
// to end with its context. At most MaxAbandoned abandoned checks of one
// target may still be running; while that many are, the target reports
// Timeout instead of starting another, so a callee that never returns
// cannot pile up goroutines.
const (
	AbandonGrace = 2 * time.Second
	MaxAbandoned = 2
)

// Entry describes one configured provider entry for Engine.Load.
type Entry struct {
	Kind    string
	Name    string
	Reasons ReasonSet // the kind's closed reason set, checked by Load
	Timeout time.Duration
	// MinInterval is how long a verdict is reused instead of checking.
	MinInterval time.Duration
	// Fingerprint identifies the entry's settings: a reload that keeps
	// kind, name and fingerprint keeps the checker and its verdicts.
	Fingerprint string
	// Build makes the entry's checker; it does no network I/O.
	Build func() (Checker, error)
}

// Engine runs the checks of the configured providers: every target
// concurrently under the caller's deadline, at most one live check per
// target whoever asked, and verdicts reused within min_interval. It keeps
// what outlives a scrape and a reload: one state per target and the check
// counters.
type Engine struct {
	logger *slog.Logger

	reloadMu sync.Mutex // one Load at a time
	mu       sync.RWMutex
	list     []*provider
	byName   map[string]*provider
	// counters survive reloads, as counters must.
	counters map[string]*counters
}

type counters struct {
	modes     [4]atomic.Uint64 // indexed like Modes
	abandoned atomic.Uint64
}

type provider struct {
	Entry
	checker Checker
	targets []Target
	states  map[string]*state
	checks  *counters
}

// state is everything the engine knows of one target.
type state struct {
	mu sync.Mutex
	// last is the newest verdict, nil until the first; provisional marks
	// one the engine made up for a check that overran its deadline, which
	// the check's own verdict replaces when it comes.
	last        *Result
	provisional bool
	// cached is the last verdict a check of these settings produced, and
	// cachedLog that check's log: what min_interval and debug serve.
	cached     *Result
	cachedLog  *CheckLog
	cachedMemo *factsMemo
	transition time.Time // when ready last changed
	history    []Transition
	inflight   *call // the one live check of the target, if any
	// address is where the last check that said so found the target
	// (Verdict.Address); "" keeps the configured one.
	address string
	// abandoned counts the abandoned checks of the target that are still
	// running (at most MaxAbandoned).
	abandoned int
	// logHandler is the engine's log handler with the target's
	// attributes, made once: what a check logs goes there and to its
	// CheckLog.
	logHandler slog.Handler
}

// Transition is a change of a target's reason.
type Transition struct {
	Time     time.Time
	From, To Reason // From is "" for the first verdict
}

type call struct {
	done     chan struct{}
	deadline time.Time
	res      Result
	log      *CheckLog
	memo     *factsMemo
	// abandoned is set, under the target's lock, when the engine gave up
	// waiting for the check; its verdict is then dropped.
	abandoned bool
}

// NewEngine returns an engine without providers.
func NewEngine(logger *slog.Logger) *Engine {
	return &Engine{logger: logger, byName: map[string]*provider{}, counters: map[string]*counters{}}
}

// Load puts entries in force as one transaction. An entry whose kind, name
// and fingerprint are unchanged keeps its checker and target states; any
// other entry gets a new checker, which adopts the old one's kept
// connections if it is an Adopter. If any entry fails to build, what was
// built is closed and the running providers stay. Replaced checkers are
// closed after the swap; their in-flight checks finish on their own.
func (e *Engine) Load(entries []Entry) error {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	e.mu.RLock()
	old := e.byName
	e.mu.RUnlock()

	for _, en := range entries {
		if err := en.Reasons.Validate(); err != nil {
			return fmt.Errorf("%s %q: %w", en.Kind, en.Name, err)
		}
	}
	next := make([]*provider, 0, len(entries))
	var built []Checker
	for _, en := range entries {
		prev := old[en.Name]
		if prev != nil && prev.Kind == en.Kind && prev.Fingerprint == en.Fingerprint {
			p := *prev
			p.Entry = en
			next = append(next, &p)
			continue
		}
		c, err := en.Build()
		if err != nil {
			closeAll(built)
			return fmt.Errorf("%s %q: %w", en.Kind, en.Name, err)
		}
		built = append(built, c)
		p := &provider{Entry: en, checker: c, targets: c.Targets(), states: map[string]*state{}}
		for _, t := range p.targets {
			st := &state{}
			// A target that stays keeps its history for the status page,
			// but neither its cache nor its last verdict: the settings
			// changed, and a verdict about the old ones (a region no
			// longer configured, another minimum) would be shown as the
			// new ones' until the next check. It reads "not checked yet".
			if prev != nil && prev.Kind == en.Kind {
				if ps := prev.states[t.Name]; ps != nil {
					ps.mu.Lock()
					st.history = slices.Clone(ps.history)
					ps.mu.Unlock()
				}
			}
			p.states[t.Name] = st
		}
		next = append(next, p)
	}
	// Every entry is built: nothing can fail from here on.
	for _, p := range next {
		if prev := old[p.Name]; prev != nil && prev.Kind == p.Kind && prev.checker != p.checker {
			if a, ok := p.checker.(Adopter); ok {
				a.Adopt(prev.checker)
			}
		}
	}
	byName := make(map[string]*provider, len(next))
	e.mu.Lock()
	for _, p := range next {
		k := p.Kind + "/" + p.Name
		if e.counters[k] == nil {
			e.counters[k] = &counters{}
		}
		p.checks = e.counters[k]
		byName[p.Name] = p
	}
	e.list, e.byName = next, byName
	e.mu.Unlock()

	var gone []*provider
	for _, p := range old {
		if np := byName[p.Name]; np == nil || np.checker != p.checker {
			gone = append(gone, p)
		}
	}
	closeBounded(e.logger, gone)
	return nil
}

// CloseBound is how long closing the checkers that a reload replaced, or
// all of them at shutdown, may take (docs/configuration.md: "Timeouts"). A checker whose
// Close has not returned by then (a connection attempt stuck in a callee that ignores
// its context) is left to finish on its own, so that neither a reload nor
// SIGTERM waits on it.
const CloseBound = 3 * time.Second

func closeAll(cs []Checker) {
	var ps []*provider
	for _, c := range cs {
		ps = append(ps, &provider{checker: c})
	}
	closeBounded(slog.New(slog.DiscardHandler), ps)
}

// closeBounded closes the checkers of ps concurrently and returns when
// they all have, or after CloseBound.
func closeBounded(logger *slog.Logger, ps []*provider) {
	var wg sync.WaitGroup
	for _, p := range ps {
		c, ok := p.checker.(Closer)
		if !ok {
			continue
		}
		wg.Go(func() {
			if err := c.Close(); err != nil {
				logger.Warn("closing replaced provider", "provider", p.Kind, "name", p.Name, "err", err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(CloseBound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		logger.Warn("closing providers did not finish in time; left to end on their own", "bound", CloseBound)
	}
}

// Close closes every checker; the engine must not be used afterwards.
func (e *Engine) Close() {
	_ = e.Load(nil)
}

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
	Kind, Name string
	Reasons    ReasonSet
	Budget     time.Duration
	Targets    []TargetResult
	// Checks are the cumulative check counts by mode.
	Checks map[string]uint64
	// Abandoned is the cumulative count of abandoned checks.
	Abandoned uint64
}

// TargetResult is a target's verdict as seen by one caller.
type TargetResult struct {
	Result
	Checked        bool // false until the target's first verdict
	Mode           string
	LastTransition time.Time
	// Log is the debug log of the check that produced the verdict; nil
	// for a verdict the engine made up.
	Log         *CheckLog
	Transitions []Transition // oldest first; Status only
	// memo is the collected metrics of the verdict's Facts, nil for a
	// verdict without a check of its own.
	memo *factsMemo
	// BackoffUntil is when a target held back by its checker (Backoffer)
	// will be checked again; zero when it is not held back. Status only.
	BackoffUntil time.Time
}

// LookupError says that a Request names no configured provider or target.
type LookupError struct{ msg string }

func (e *LookupError) Error() string { return e.msg }

func (e *Engine) selectProviders(req Request) ([]*provider, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if req.Name == "" {
		if req.Target != "" {
			return nil, &LookupError{"target given without name"}
		}
		var out []*provider
		for _, p := range e.list {
			if req.Kinds == nil || req.Kinds[p.Kind] {
				out = append(out, p)
			}
		}
		return out, nil
	}
	p := e.byName[req.Name]
	if p == nil {
		return nil, &LookupError{fmt.Sprintf("unknown name %q", req.Name)}
	}
	if req.Target != "" && p.states[req.Target] == nil {
		return nil, &LookupError{fmt.Sprintf("unknown target %q of %s %q", req.Target, p.Kind, p.Name)}
	}
	return []*provider{p}, nil
}

// targetsOf lists the selected targets of p: those of the loaded
// configuration, never a call into the checker, so that neither a scrape
// nor the status page waits on a provider's lock (docs/configuration.md: "Timeouts"). A
// target's address is the configured one until a check reports where it
// found the target (Verdict.Address: a kubeconfig's server).
func targetsOf(p *provider, only string) []Target {
	var out []Target
	for _, t := range p.targets {
		if only != "" && t.Name != only {
			continue
		}
		st := p.states[t.Name]
		st.mu.Lock()
		if st.address != "" {
			t.Address = st.address
		}
		st.mu.Unlock()
		out = append(out, t)
	}
	return out
}

func (p *provider) result(budget time.Duration) ProviderResult {
	pr := ProviderResult{Kind: p.Kind, Name: p.Name, Reasons: p.Reasons, Budget: budget, Checks: map[string]uint64{}}
	for i, m := range Modes {
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
	var wg sync.WaitGroup
	for i, p := range ps {
		budget := Budget(p.Timeout, req.ScrapeTimeout, req.Offset)
		budget -= reserve(req.Reserve, budget)
		out[i] = ProviderResult{Kind: p.Kind, Name: p.Name, Reasons: p.Reasons, Budget: budget}
		targets := targetsOf(p, req.Target)
		out[i].Targets = make([]TargetResult, len(targets))
		// One deadline for all the provider's targets: a context per
		// target costs a timer per target.
		var pctx context.Context
		for j, t := range targets {
			if tr, ok := e.reuse(p, p.states[t.Name], t); ok {
				out[i].Targets[j] = tr
				continue
			}
			if pctx == nil {
				var cancel context.CancelFunc
				pctx, cancel = context.WithDeadline(ctx, start.Add(budget))
				defer cancel()
			}
			wg.Go(func() { out[i].Targets[j] = e.checkTarget(pctx, p, t) })
		}
	}
	wg.Wait()
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
		for _, t := range targetsOf(p, "") {
			st := p.states[t.Name]
			st.mu.Lock()
			tr := TargetResult{Result: Result{Target: t}, LastTransition: st.transition, Transitions: slices.Clone(st.history)}
			if st.last != nil {
				tr.Result, tr.Checked = *st.last, true
				tr.Target = t
			}
			st.mu.Unlock()
			if b, ok := p.checker.(Backoffer); ok && tr.Checked {
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
func (p *provider) withFacts(tr TargetResult) TargetResult {
	if tr.Facts == nil {
		if k, ok := p.checker.(FactKeeper); ok {
			// Kept facts change from scrape to scrape: not the verdict's.
			tr.Facts, tr.memo = keptFacts(k, tr.Target.Name), nil
		}
	}
	return tr
}

func (e *Engine) count(p *provider, mode string) {
	p.checks.modes[slices.Index(Modes, mode)].Add(1)
}

// checkTarget gets a verdict for one caller: the cached one within
// min_interval, else the one live check of the target, joined or started.
// A caller that joined a check with a shorter budget than its own, which
// then timed out, waits no longer than that check and starts its own.
func (e *Engine) checkTarget(ctx context.Context, p *provider, t Target) TargetResult {
	st := p.states[t.Name]
	for {
		if tr, ok := e.reuse(p, st, t); ok {
			return tr
		}
		st.mu.Lock()
		c, mode := st.inflight, ModeShared
		if c != nil && overdue(c, time.Now()) {
			e.abandonLocked(p, st, c)
			c = nil
		}
		if c == nil {
			if st.abandoned >= MaxAbandoned {
				n := st.abandoned
				st.mu.Unlock()
				return e.stuck(p, st, t, n)
			}
			c, mode = e.start(ctx, p, st, t), ModeLive
			st.inflight = c
		}
		st.mu.Unlock()

		select {
		case <-c.done:
			if mode == ModeShared && c.res.Reason == ReasonTimeout && ctx.Err() == nil && c.deadline.Before(checkDeadline(ctx, 0)) {
				continue // its budget was shorter than ours
			}
			e.count(p, mode)
			return p.withFacts(e.answer(st, c.res, mode, c.log, c.memo))
		case <-ctx.Done():
		}
		select {
		case <-c.done:
			// The check ended at the same moment: its verdict (already
			// Timeout unless it was Ready) says more.
			e.count(p, mode)
			return p.withFacts(e.answer(st, c.res, mode, c.log, c.memo))
		default:
		}
		// The check did not answer in time; this caller answers anyway.
		now := time.Now()
		msg := fmt.Sprintf("no verdict within the budget: %v", context.Cause(ctx))
		if !now.Before(c.deadline) {
			msg = fmt.Sprintf("the check did not return by its deadline (%v); it is abandoned %v after it", context.Cause(ctx), AbandonGrace)
		}
		res := Result{
			Verdict:   Verdict{Reason: ReasonTimeout, Message: msg},
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
		return p.withFacts(e.answer(st, res, mode, nil, nil))
	}
}

// overdue tells whether check c, still running, is past its deadline
// plus AbandonGrace.
func overdue(c *call, now time.Time) bool {
	return !now.Before(c.deadline.Add(AbandonGrace))
}

// abandonLocked gives up on the target's in-flight check c, which is
// overdue: the next caller starts a fresh check. It is counted and
// logged once, here. The caller holds st.mu.
func (e *Engine) abandonLocked(p *provider, st *state, c *call) {
	st.inflight = nil
	c.abandoned = true
	st.abandoned++
	p.checks.abandoned.Add(1)
	e.logger.Warn("check abandoned: it did not return by its deadline plus the grace",
		"provider", p.Kind, "name", p.Name, "deadline", c.deadline, "grace", AbandonGrace,
		"still_running", st.abandoned)
}

// stuck is the verdict of a target whose abandoned checks, n of them,
// have not returned: no new check starts until one does.
func (e *Engine) stuck(p *provider, st *state, t Target, n int) TargetResult {
	res := Result{
		Verdict: Verdict{Reason: ReasonTimeout, Message: fmt.Sprintf(
			"%d abandoned checks of this target have not returned; no new check starts until one does", n)},
		Target:    t,
		CheckedAt: time.Now(),
	}
	// No check ran: checks_total is not counted.
	record(st, res, true)
	return p.withFacts(e.answer(st, res, ModeLive, nil, nil))
}

// reuse returns the target's last verdict when it is to be served
// without a check: younger than min_interval, or the target is held back
// by its checker and no check of it is in flight.
func (e *Engine) reuse(p *provider, st *state, t Target) (TargetResult, bool) {
	st.mu.Lock()
	mode := ""
	switch {
	case st.cached != nil && p.MinInterval > 0 && time.Since(st.cached.CheckedAt) < p.MinInterval:
		mode = ModeCached
	case st.cached != nil && st.inflight == nil && backingOff(p.checker, t.Name):
		mode = ModeBackoff
	default:
		st.mu.Unlock()
		return TargetResult{}, false
	}
	tr := TargetResult{Result: *st.cached, Checked: true, Mode: mode, LastTransition: st.transition, Log: st.cachedLog, memo: st.cachedMemo}
	st.mu.Unlock()
	tr.Target = t
	e.count(p, mode)
	return p.withFacts(tr), true
}

// backingOff tells whether c holds back the live checks of target now.
func backingOff(c Checker, target string) bool {
	b, ok := c.(Backoffer)
	return ok && time.Now().Before(b.NotBefore(target))
}

func (e *Engine) answer(st *state, res Result, mode string, log *CheckLog, memo *factsMemo) TargetResult {
	st.mu.Lock()
	defer st.mu.Unlock()
	return TargetResult{Result: res, Checked: true, Mode: mode, LastTransition: st.transition, Log: log, memo: memo}
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
func (e *Engine) start(ctx context.Context, p *provider, st *state, t Target) *call {
	c := &call{done: make(chan struct{}), deadline: checkDeadline(ctx, p.Timeout), log: &CheckLog{}, memo: &factsMemo{}}
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
		if v.Reason != ReasonReady && v.Reason != ReasonTimeout && Ended(cctx) {
			v.Message = fmt.Sprintf("deadline reached (%s: %s)", v.Reason, v.Message)
			v.Reason = ReasonTimeout
		}
		if !p.Reasons.Contains(v.Reason) {
			logger.Error("checker returned a reason outside its set", "reason", v.Reason, "message", v.Message)
			v = Verdict{Reason: ReasonUnknown, Message: fmt.Sprintf("invalid reason %q: %s", BoundString(string(v.Reason)), v.Message)}
		}
		// The one place every kind's message passes (docs/security.md).
		v.Message = BoundString(v.Message)
		st.mu.Lock()
		prev := st.cached
		st.mu.Unlock()
		if prev == nil || !sameFacts(prev.Facts, v.Facts) {
			v = settleFacts(v, c.memo, p.Name, t.Name, logger)
		}
		if v.Address != "" {
			t.Address = v.Address
			st.mu.Lock()
			st.address = v.Address
			st.mu.Unlock()
		}
		res := Result{Verdict: v, Target: t, CheckedAt: end, Duration: end.Sub(begin)}
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
		// Facts (checker.go: Facts): their metrics are not collected again.
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
func sameFacts(a, b Facts) bool {
	return a != nil && reflect.TypeOf(a).Kind() == reflect.Pointer && a == b
}

func safeCheck(ctx context.Context, c Checker, t Target, logger *slog.Logger) (v Verdict) {
	defer func() {
		if rec := recover(); rec != nil {
			text := BoundString(fmt.Sprint(rec))
			logger.Error("checker panicked", "panic", text, "stack", string(debug.Stack()))
			v = Verdict{Reason: ReasonUnknown, Message: "checker panicked: " + text}
		}
	}()
	return c.Check(ctx, logger, t.Name)
}

// record keeps the newest verdict of a target, when ready last changed and
// the recent changes of its reason. A provisional verdict gives way to the
// check's own whenever that arrives.
func record(st *state, res Result, provisional bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.last != nil && res.CheckedAt.Before(st.last.CheckedAt) && (provisional || !st.provisional) {
		return
	}
	var from Reason
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

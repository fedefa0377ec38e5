package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Check modes, the mode label of provider_health_exporter_checks_total.
const (
	ModeLive   = "live"   // the check ran for this caller
	ModeShared = "shared" // joined a check a concurrent scrape had started
	ModeCached = "cached" // reused a verdict younger than min_interval
)

// Modes lists the check modes in a stable order.
var Modes = []string{ModeLive, ModeShared, ModeCached}

// Spec describes one configured provider entry for Engine.SetProviders.
type Spec struct {
	Kind        string // ProviderKubernetes, ProviderGCP or ProviderKVM
	Name        string
	Timeout     time.Duration
	MinInterval time.Duration
	Checker     Checker
	// Fingerprint identifies the entry's settings. When a reload keeps an
	// entry with the same kind, name and fingerprint, its cached verdicts
	// stay valid, so min_interval keeps protecting the API across reloads.
	Fingerprint string
}

// Engine runs the checks of the configured providers: every target
// concurrently under the caller's deadline, one in-flight check per target
// shared by concurrent callers, and verdicts reused within min_interval. It
// keeps what must outlive a single scrape and a reload: last verdicts,
// transition times and counters.
type Engine struct {
	logger *slog.Logger
	now    func() time.Time

	mu        sync.RWMutex
	providers []*provider
	byName    map[string]*provider
	states    map[stateKey]*targetState
	checks    map[checksKey]*atomic.Uint64
}

type stateKey struct{ kind, name, target string }

type checksKey struct{ kind, name, mode string }

type targetState struct {
	last       Result
	transition time.Time
	// provisional marks a last verdict the framework made up for a check
	// that never answered.
	provisional bool
}

type provider struct {
	Spec
	targets []Target
	runs    map[string]*run
}

// run serialises the checks of one target.
type run struct {
	mu       sync.Mutex
	inflight *call
	last     *Result // the last completed check, for min_interval
}

type call struct {
	done     chan struct{}
	deadline time.Time
	res      Result
}

// NewEngine returns an engine without providers.
func NewEngine(logger *slog.Logger) *Engine {
	return &Engine{
		logger: logger,
		now:    time.Now,
		byName: map[string]*provider{},
		states: map[stateKey]*targetState{},
		checks: map[checksKey]*atomic.Uint64{},
	}
}

// SetProviders replaces the configured providers. Checkers that implement
// Adopter take over from the checker of the same kind and name; every
// replaced checker that implements Closer is closed afterwards. In-flight
// checks of replaced providers finish on their own.
func (e *Engine) SetProviders(specs []Spec) {
	next := make([]*provider, 0, len(specs))
	byName := make(map[string]*provider, len(specs))
	e.mu.Lock()
	old := e.byName
	for _, s := range specs {
		p := &provider{Spec: s, targets: s.Checker.Targets(), runs: map[string]*run{}}
		prev := old[s.Name]
		sameEntry := prev != nil && prev.Kind == s.Kind && prev.Fingerprint == s.Fingerprint
		for _, t := range p.targets {
			r := &run{}
			if sameEntry {
				if pr := prev.runs[t.Name]; pr != nil {
					pr.mu.Lock()
					r.last = pr.last
					pr.mu.Unlock()
				}
			}
			p.runs[t.Name] = r
		}
		if a, ok := s.Checker.(Adopter); ok && prev != nil && prev.Kind == s.Kind && prev.Checker != s.Checker {
			a.Adopt(prev.Checker)
		}
		next = append(next, p)
		byName[s.Name] = p
	}
	e.providers, e.byName = next, byName
	// Forget state of targets that are gone, so a target that comes back
	// later starts with a fresh transition time.
	keep := map[stateKey]bool{}
	for _, p := range next {
		for _, t := range p.targets {
			keep[stateKey{p.Kind, p.Name, t.Name}] = true
		}
	}
	for k := range e.states {
		if !keep[k] {
			delete(e.states, k)
		}
	}
	e.mu.Unlock()

	for _, p := range old {
		if np := byName[p.Name]; np != nil && np.Checker == p.Checker {
			continue
		}
		if c, ok := p.Checker.(Closer); ok {
			if err := c.Close(); err != nil {
				e.logger.Warn("closing replaced provider", "provider", p.Kind, "name", p.Name, "err", err)
			}
		}
	}
}

// Unchanged returns the checker in force for the entry of that kind and name
// if its fingerprint is the same, so that a reload can keep it (its clients,
// tokens and connections) instead of building a new one; nil otherwise.
func (e *Engine) Unchanged(kind, name, fingerprint string) Checker {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if p := e.byName[name]; p != nil && p.Kind == kind && p.Fingerprint == fingerprint {
		return p.Checker
	}
	return nil
}

// Close closes every checker; the engine must not be used afterwards.
func (e *Engine) Close() {
	e.SetProviders(nil)
}

// Request selects what Run checks and under which budget.
type Request struct {
	Name   string // one provider entry; "" = all
	Target string // one target of that entry; "" = all
	// Kinds, when not nil, keeps only the providers of these kinds (with
	// Name ""); an empty map keeps none.
	Kinds map[string]bool
	// ScrapeTimeout is the scrape's own timeout (0 = none) and Offset the
	// safety margin subtracted from it (SPEC §5).
	ScrapeTimeout time.Duration
	Offset        time.Duration
	// Debug, when set, forces live checks (no sharing, no cache) whose log
	// goes to Debug as well as to the engine's logger.
	Debug slog.Handler
}

// ProviderResult is the outcome of Run for one provider entry.
type ProviderResult struct {
	Kind, Name string
	Budget     time.Duration
	Targets    []TargetResult
	// Checks are the cumulative check counts by mode after this run.
	Checks map[string]uint64
}

// TargetResult is a target's verdict as seen by one caller.
type TargetResult struct {
	Result
	Mode           string
	LastTransition time.Time
}

// LookupError says that a Request names no configured provider or target.
type LookupError struct{ msg string }

func (e *LookupError) Error() string { return e.msg }

// selectProviders resolves a request to providers, or a *LookupError.
func (e *Engine) selectProviders(req Request) ([]*provider, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if req.Name == "" {
		if req.Target != "" {
			return nil, &LookupError{"target given without name"}
		}
		var out []*provider
		for _, p := range e.providers {
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
	if req.Target != "" && p.runs[req.Target] == nil {
		return nil, &LookupError{fmt.Sprintf("unknown target %q of %s %q", req.Target, p.Kind, p.Name)}
	}
	return []*provider{p}, nil
}

// Run checks the selected targets concurrently and returns one result per
// target, in configuration order. Each provider gets the budget of SPEC §5
// from its timeout and the request's scrape timeout; Run returns when every
// target has a verdict or its budget is spent, even if a checker never
// returns.
func (e *Engine) Run(ctx context.Context, req Request) ([]ProviderResult, error) {
	ps, err := e.selectProviders(req)
	if err != nil {
		return nil, err
	}
	// Deadlines follow the real clock; e.now only stamps verdicts.
	start := time.Now()
	out := make([]ProviderResult, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		budget := Budget(p.Timeout, req.ScrapeTimeout, req.Offset)
		out[i] = ProviderResult{Kind: p.Kind, Name: p.Name, Budget: budget}
		// Names are fixed per checker, but an address may change without a
		// reload (a rotated kubeconfig pointing elsewhere): ask each time.
		var targets []Target
		for _, t := range p.Checker.Targets() {
			if p.runs[t.Name] != nil && (req.Target == "" || t.Name == req.Target) {
				targets = append(targets, t)
			}
		}
		out[i].Targets = make([]TargetResult, len(targets))
		for j, t := range targets {
			wg.Go(func() {
				tctx, cancel := context.WithDeadline(ctx, start.Add(budget))
				defer cancel()
				out[i].Targets[j] = e.checkTarget(tctx, p, t, req.Debug)
			})
		}
	}
	wg.Wait()
	e.mu.RLock()
	for i := range out {
		out[i].Checks = map[string]uint64{}
		for _, m := range Modes {
			if c := e.checks[checksKey{out[i].Kind, out[i].Name, m}]; c != nil {
				out[i].Checks[m] = c.Load()
			}
		}
		for j := range out[i].Targets {
			tr := &out[i].Targets[j]
			st := e.states[stateKey{out[i].Kind, out[i].Name, tr.Target.Name}]
			if st != nil {
				tr.LastTransition = st.transition
			}
			if tr.Facts == nil {
				if k, ok := ps[i].Checker.(FactKeeper); ok {
					tr.Facts = k.Facts(tr.Target.Name)
				}
			}
		}
	}
	e.mu.RUnlock()
	return out, nil
}

func (e *Engine) checkTarget(ctx context.Context, p *provider, t Target, debugHandler slog.Handler) TargetResult {
	r := p.runs[t.Name]
	var c *call
	mode := ModeLive
	if debugHandler != nil {
		c = e.start(ctx, p, t, debugHandler, r)
	} else {
		r.mu.Lock()
		switch {
		case r.last != nil && p.MinInterval > 0 && e.now().Sub(r.last.CheckedAt) < p.MinInterval:
			res := *r.last
			res.Target = t
			r.mu.Unlock()
			e.count(p, ModeCached)
			return TargetResult{Result: res, Mode: ModeCached}
		case r.inflight != nil && joinable(r.inflight, ctx):
			c, mode = r.inflight, ModeShared
		default:
			// No check in flight, or one that would end well before this
			// caller's own budget (a scrape with a shorter timeout started
			// it, or it is stuck past its deadline): run one for this
			// caller, and let later callers join the newer one.
			c = e.start(ctx, p, t, nil, r)
			r.inflight = c
		}
		r.mu.Unlock()
	}
	e.count(p, mode)

	started := e.now()
	select {
	case <-c.done:
		return TargetResult{Result: c.res, Mode: mode}
	case <-ctx.Done():
		select {
		case <-c.done:
			// The check ended at the same moment: its verdict (already
			// Timeout unless it was Ready) says more.
			return TargetResult{Result: c.res, Mode: mode}
		default:
		}
		// The checker did not answer in time; this caller answers anyway.
		now := e.now()
		res := Result{
			Verdict:   Verdict{Reason: ReasonTimeout, Message: fmt.Sprintf("no verdict within the budget: %v", context.Cause(ctx))},
			Target:    t,
			CheckedAt: now,
			Duration:  now.Sub(started),
		}
		// Only a check that overran its own deadline (a stuck checker) is
		// recorded here, provisionally: a caller that went away, or had a
		// shorter deadline than the check it joined, must not make ready
		// flap on the status page, and the check's own verdict, if it ever
		// comes, replaces this one.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && !time.Now().Before(c.deadline) {
			e.record(p, res, true)
		}
		return TargetResult{Result: res, Mode: mode}
	}
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

// joinable tells whether a caller may wait on an in-flight check instead of
// starting one: the check must still have nearly all of the time this
// caller's own check would get (an HA pair scraping a moment apart shares;
// a scrape with a longer timeout does not inherit a shorter one's budget,
// and nobody joins a check stuck past its deadline).
func joinable(c *call, ctx context.Context) bool {
	left := time.Until(c.deadline)
	mine := time.Until(checkDeadline(ctx, 0))
	return left > 0 && left >= mine*9/10
}

// start runs one live check in its own goroutine. The check keeps the
// caller's deadline (less a grace) but not its cancellation: callers that
// joined it must not see it cancelled because the first caller went away.
// A debug handler, when given, receives the check's log too.
func (e *Engine) start(ctx context.Context, p *provider, t Target, debugHandler slog.Handler, r *run) *call {
	logger := e.logger
	if debugHandler != nil {
		logger = slog.New(slog.NewMultiHandler(e.logger.Handler(), debugHandler))
	}
	logger = logger.With("provider", p.Kind, "name", p.Name, "target", t.Name)
	deadline := checkDeadline(ctx, p.Timeout)
	c := &call{done: make(chan struct{}), deadline: deadline}
	go func() {
		defer close(c.done)
		cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		begin := e.now()
		v := e.safeCheck(cctx, p, t, logger)
		end := e.now()
		if v.Reason != ReasonReady && cctx.Err() != nil && v.Reason != ReasonTimeout {
			v.Message = fmt.Sprintf("deadline reached (%s: %s)", v.Reason, v.Message)
			v.Reason = ReasonTimeout
		}
		if !InSet(p.Kind, v.Reason) {
			logger.Error("checker returned a reason outside its set", "reason", v.Reason, "message", v.Message)
			v = Verdict{Reason: ReasonUnknown, Message: fmt.Sprintf("invalid reason %q: %s", v.Reason, v.Message)}
		}
		c.res = Result{Verdict: v, Target: t, CheckedAt: end, Duration: end.Sub(begin)}
		r.mu.Lock()
		if r.inflight == c {
			r.inflight = nil
		}
		prev := r.last
		r.last = &c.res
		r.mu.Unlock()
		// A verdict is logged at info when the reason changes, so a target
		// that stays broken does not fill the log at every scrape; the
		// message of every check is at debug and on the status page.
		level := slog.LevelDebug
		if prev == nil || prev.Reason != v.Reason {
			level = slog.LevelInfo
		}
		logger.Log(cctx, level, "check done", "reason", v.Reason, "message", v.Message, "duration_seconds", c.res.Duration.Seconds())
		e.record(p, c.res, false)
	}()
	return c
}

func (e *Engine) safeCheck(ctx context.Context, p *provider, t Target, logger *slog.Logger) (v Verdict) {
	defer func() {
		if rec := recover(); rec != nil {
			logger.Error("checker panicked", "panic", fmt.Sprint(rec), "stack", string(debug.Stack()))
			v = Verdict{Reason: ReasonUnknown, Message: fmt.Sprintf("checker panicked: %v", rec)}
		}
	}()
	return p.Checker.Check(ctx, logger, t.Name)
}

func (e *Engine) count(p *provider, mode string) {
	k := checksKey{p.Kind, p.Name, mode}
	e.mu.RLock()
	c := e.checks[k]
	e.mu.RUnlock()
	if c == nil {
		e.mu.Lock()
		if c = e.checks[k]; c == nil {
			c = &atomic.Uint64{}
			e.checks[k] = c
		}
		e.mu.Unlock()
	}
	c.Add(1)
}

// record keeps the newest verdict of a target and when ready last changed.
// A provisional verdict (made up by a caller for a stuck check) gives way to
// the check's own verdict whenever that arrives.
func (e *Engine) record(p *provider, res Result, provisional bool) {
	k := stateKey{p.Kind, p.Name, res.Target.Name}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.byName[p.Name] != p {
		return // replaced by a reload while the check ran
	}
	st := e.states[k]
	if st == nil {
		st = &targetState{last: res, transition: res.CheckedAt}
		e.states[k] = st
	}
	if res.CheckedAt.Before(st.last.CheckedAt) && (provisional || !st.provisional) {
		return
	}
	st.provisional = provisional
	if st.last.Reason.Ready() != res.Reason.Ready() {
		st.transition = res.CheckedAt
	}
	st.last = res
}

package engine

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/internal/redact"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Entry describes one configured provider entry for Engine.Load.
type Entry struct {
	Kind    string
	Name    string
	Reasons provider.ReasonSet // the kind's closed reason set, checked by Load
	Timeout time.Duration
	// MinInterval is how long a verdict is reused instead of checking.
	MinInterval time.Duration
	// Fingerprint identifies the entry's settings: a reload that keeps
	// kind, name and fingerprint keeps the checker and its verdicts.
	Fingerprint string
	// Build makes the entry's checker; it does no network I/O.
	Build func() (provider.Checker, error)
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
	list     []*loaded
	byName   map[string]*loaded
	// counters survive reloads, as counters must.
	counters map[string]*counters
}

type counters struct {
	modes     [4]atomic.Uint64 // indexed like Modes
	abandoned atomic.Uint64
}

// loaded is one configured entry in force: its checker, its targets as
// loaded (addresses redacted), their states and the entry's counters.
type loaded struct {
	Entry
	checker provider.Checker
	targets []provider.Target
	states  *targetStates
	checks  *counters
}

// targetStates are the states of a provider's targets, each made when it
// is first needed: a KVM entry of 100,000 hosts costs 12 bytes a target
// until its targets are checked, not the 190 of a state and a map entry
// (docs/scaling.md: "Large configurations").
type targetStates struct {
	targets []provider.Target
	// order lists the indexes of targets sorted by name.
	order []int32
	live  []atomic.Pointer[state]
}

func newTargetStates(targets []provider.Target) *targetStates {
	ts := &targetStates{targets: targets, order: make([]int32, len(targets)), live: make([]atomic.Pointer[state], len(targets))}
	for i := range ts.order {
		ts.order[i] = int32(i)
	}
	slices.SortFunc(ts.order, func(a, b int32) int { return strings.Compare(targets[a].Name, targets[b].Name) })
	return ts
}

// index is the index of the target named name, or -1.
func (ts *targetStates) index(name string) int {
	i, ok := slices.BinarySearchFunc(ts.order, name, func(j int32, name string) int {
		return strings.Compare(ts.targets[j].Name, name)
	})
	if !ok {
		return -1
	}
	return int(ts.order[i])
}

// at is the state of the i-th target, made if it was not yet.
func (ts *targetStates) at(i int) *state {
	if st := ts.live[i].Load(); st != nil {
		return st
	}
	ts.live[i].CompareAndSwap(nil, &state{})
	return ts.live[i].Load()
}

// of is the state of the target named name, made if it was not yet; nil
// for a name the provider does not have.
func (ts *targetStates) of(name string) *state {
	i := ts.index(name)
	if i < 0 {
		return nil
	}
	return ts.at(i)
}

// peek is the state of the i-th target if it was made; a target not yet
// made has never been checked, and reads as a zero state does.
func (ts *targetStates) peek(i int) *state { return ts.live[i].Load() }

// state is everything the engine knows of one target.
type state struct {
	mu sync.Mutex
	// last is the newest verdict, nil until the first; provisional marks
	// one the engine made up for a check that overran its deadline, which
	// the check's own verdict replaces when it comes.
	last        *exposition.Result
	provisional bool
	// cached is the last verdict a check of these settings produced, and
	// cachedLog that check's log: what min_interval and debug serve.
	cached     *exposition.Result
	cachedLog  *CheckLog
	cachedMemo *exposition.FactsMemo
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

type call struct {
	done     chan struct{}
	deadline time.Time
	res      exposition.Result
	log      *CheckLog
	memo     *exposition.FactsMemo
	// abandoned is set, under the target's lock, when the engine gave up
	// waiting for the check; its verdict is then dropped.
	abandoned bool
}

// NewEngine returns an engine without providers.
func NewEngine(logger *slog.Logger) *Engine {
	return &Engine{logger: logger, byName: map[string]*loaded{}, counters: map[string]*counters{}}
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
	next := make([]*loaded, 0, len(entries))
	var built []provider.Checker
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
		targets := redactedTargets(c)
		p := &loaded{Entry: en, checker: c, targets: targets, states: newTargetStates(targets)}
		if prev != nil && prev.Kind == en.Kind {
			keepHistory(prev, p)
		}
		next = append(next, p)
	}
	// Every entry is built: nothing can fail from here on.
	for _, p := range next {
		if prev := old[p.Name]; prev != nil && prev.Kind == p.Kind && prev.checker != p.checker {
			if a, ok := p.checker.(provider.Adopter); ok {
				a.Adopt(prev.checker)
			}
		}
	}
	byName := make(map[string]*loaded, len(next))
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

	var gone []*loaded
	for _, p := range old {
		if np := byName[p.Name]; np == nil || np.checker != p.checker {
			gone = append(gone, p)
		}
	}
	closeBounded(e.logger, gone)
	return nil
}

// keepHistory gives each target of p that prev had, and checked, the
// history prev's state holds for the status page, but neither its cache
// nor its last verdict: the settings changed, and a verdict about the old
// ones (a region no longer configured, another minimum) would be shown as
// the new ones' until the next check. It reads "not checked yet".
func keepHistory(prev, p *loaded) {
	for i, t := range prev.targets {
		ps := prev.states.peek(i)
		if ps == nil {
			continue
		}
		j := p.states.index(t.Name)
		if j < 0 {
			continue
		}
		ps.mu.Lock()
		h := slices.Clone(ps.history)
		ps.mu.Unlock()
		if h != nil {
			p.states.at(j).history = h
		}
	}
}

// redactedTargets are the targets of c with their addresses redacted
// (redact.URL), as every address the exporter shows is: a URL's userinfo
// and query values can be secrets, and the address is a label.
func redactedTargets(c provider.Checker) []provider.Target {
	ts := c.Targets()
	cloned := false
	for i := range ts {
		a := redact.URL(ts[i].Address)
		if a == ts[i].Address {
			continue
		}
		// A copy, and only when an address is redacted: a KVM entry's
		// 100,000 host:port addresses never are.
		if !cloned {
			ts, cloned = slices.Clone(ts), true
		}
		ts[i].Address = a
	}
	return ts
}

func closeAll(cs []provider.Checker) {
	var ps []*loaded
	for _, c := range cs {
		ps = append(ps, &loaded{checker: c})
	}
	closeBounded(slog.New(slog.DiscardHandler), ps)
}

// closeBounded closes the checkers of ps concurrently and returns when
// they all have, or after CloseBound.
func closeBounded(logger *slog.Logger, ps []*loaded) {
	var wg sync.WaitGroup
	for _, p := range ps {
		c, ok := p.checker.(provider.Closer)
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
	t := time.NewTimer(provider.CloseBound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		logger.Warn("closing providers did not finish in time; left to end on their own", "bound", provider.CloseBound)
	}
}

// Close closes every checker; the engine must not be used afterwards.
func (e *Engine) Close() {
	_ = e.Load(nil)
}

// Entries describes to the engine every entry of cfg, kind by kind in the
// order of kinds. The fingerprint of an entry is its settings: a reload
// that leaves them alone keeps the checker, its clients, tokens,
// connections and cached verdicts.
func Entries(kinds []provider.Kind, cfg *config.Config, logger *slog.Logger) []Entry {
	var out []Entry
	for _, k := range kinds {
		for _, ce := range cfg.Entries(k.Name()) {
			name, check := ce.EntryName(), ce.Settings()
			out = append(out, Entry{
				Kind: k.Name(), Name: name, Reasons: k.EntryReasons(ce),
				Timeout: check.TimeoutDuration(), MinInterval: check.MinIntervalDuration(),
				Fingerprint: fingerprint(ce),
				Build: func() (provider.Checker, error) {
					return k.NewChecker(ce, logger.With("provider", k.Name(), "name", name))
				},
			})
		}
	}
	return out
}

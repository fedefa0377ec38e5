package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

// testChecker is the test-only checker: per target it can be ready, not
// ready, slow (honouring ctx), hang forever (ignoring ctx) or panic.
type testChecker struct {
	targets  []Target
	behave   func(ctx context.Context, target string) Verdict
	calls    atomic.Int64
	closed   atomic.Bool
	adopted  Checker
	adoptMu  sync.Mutex
	released chan struct{}
}

func (c *testChecker) Targets() []Target { return c.targets }

func (c *testChecker) Check(ctx context.Context, logger *slog.Logger, target string) Verdict {
	c.calls.Add(1)
	logger.Debug("test check", "target", target)
	return c.behave(ctx, target)
}

func (c *testChecker) Close() error { c.closed.Store(true); return nil }

func (c *testChecker) Adopt(old Checker) {
	c.adoptMu.Lock()
	c.adopted = old
	c.adoptMu.Unlock()
}

var (
	_ Checker = (*testChecker)(nil)
	_ Closer  = (*testChecker)(nil)
	_ Adopter = (*testChecker)(nil)
)

func verdictOf(r Reason) func(context.Context, string) Verdict {
	return func(context.Context, string) Verdict { return Verdict{Reason: r, Message: "test says " + string(r)} }
}

func slow(d time.Duration) func(context.Context, string) Verdict {
	return func(ctx context.Context, _ string) Verdict {
		select {
		case <-time.After(d):
			return Verdict{Reason: ReasonReady}
		case <-ctx.Done():
			// What a real client says when its request is cancelled: not
			// a timeout reason, which the framework must override.
			return Verdict{Reason: ReasonUnreachable, Message: ctx.Err().Error()}
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestEngine(t *testing.T, specs ...Spec) *Engine {
	t.Helper()
	e := NewEngine(discard())
	e.SetProviders(specs)
	t.Cleanup(e.Close)
	return e
}

func spec(kind, name string, c *testChecker) Spec {
	return Spec{Kind: kind, Name: name, Timeout: 5 * time.Second, Checker: c}
}

func one(target string) []Target {
	return []Target{{Name: target, Address: "addr-of-" + target}}
}

func TestRunVerdicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind      string
		reason    Reason
		wantUp    bool
		wantReady bool
	}{
		{ProviderKubernetes, ReasonReady, true, true},
		{ProviderKubernetes, ReasonForbidden, true, false},
		{ProviderGCP, ReasonAPIDisabled, true, false},
		{ProviderGCP, ReasonTLSError, false, false},
		{ProviderKVM, ReasonHostKeyMismatch, false, false},
		{ProviderKVM, ReasonPoolInactive, true, false},
		{ProviderKVM, ReasonLibvirtConnectFailed, true, false},
	} {
		t.Run(tc.kind+"/"+string(tc.reason), func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, spec(tc.kind, "n", &testChecker{targets: one("t"), behave: verdictOf(tc.reason)}))
			res, err := e.Run(context.Background(), Request{})
			if err != nil {
				t.Fatal(err)
			}
			got := res[0].Targets[0]
			if got.Reason != tc.reason || got.Reason.Up() != tc.wantUp || got.Reason.Ready() != tc.wantReady {
				t.Errorf("got %s up=%v ready=%v, want %s up=%v ready=%v",
					got.Reason, got.Reason.Up(), got.Reason.Ready(), tc.reason, tc.wantUp, tc.wantReady)
			}
			assertOneReason(t, res, tc.reason)
		})
	}
}

// assertOneReason checks the state set: every reason of the provider's set
// is exported and exactly one of them is 1.
func assertOneReason(t *testing.T, res []ProviderResult, want Reason) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(ResultCollector{Results: res})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "provider_health_reason" {
			continue
		}
		ones, seen := 0, map[string]bool{}
		for _, m := range mf.GetMetric() {
			r := labelValue(m, "reason")
			seen[r] = true
			if m.GetGauge().GetValue() == 1 {
				ones++
				if r != string(want) {
					t.Errorf("reason %q is 1, want %q", r, want)
				}
			}
		}
		if ones != 1 {
			t.Errorf("%d reasons are 1, want exactly one", ones)
		}
		for _, r := range Reasons(res[0].Kind) {
			if !seen[string(r)] {
				t.Errorf("reason %q missing from the state set", r)
			}
		}
		return
	}
	t.Fatal("no provider_health_reason family")
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestReasonOutsideSetBecomesUnknown(t *testing.T) {
	t.Parallel()
	// APIDisabled is a GCP reason; a kubernetes checker must not emit it.
	e := newTestEngine(t, spec(ProviderKubernetes, "k", &testChecker{targets: one("apiserver"), behave: verdictOf(ReasonAPIDisabled)}))
	res, _ := e.Run(context.Background(), Request{})
	if got := res[0].Targets[0].Reason; got != ReasonUnknown {
		t.Fatalf("reason = %s, want Unknown", got)
	}
	assertOneReason(t, res, ReasonUnknown)
}

func TestPanickingCheckerIsUnknownAndEngineKeepsServing(t *testing.T) {
	t.Parallel()
	boom := &testChecker{targets: one("t"), behave: func(context.Context, string) Verdict { panic("kaboom") }}
	fine := &testChecker{targets: one("t"), behave: verdictOf(ReasonReady)}
	e := newTestEngine(t, spec(ProviderKVM, "boom", boom), spec(ProviderGCP, "fine", fine))
	for range 3 {
		res, err := e.Run(context.Background(), Request{})
		if err != nil {
			t.Fatal(err)
		}
		if got := res[0].Targets[0]; got.Reason != ReasonUnknown || !strings.Contains(got.Message, "kaboom") {
			t.Errorf("panicking checker: %s %q, want Unknown mentioning the panic", got.Reason, got.Message)
		}
		if got := res[1].Targets[0].Reason; got != ReasonReady {
			t.Errorf("other provider: %s, want Ready", got)
		}
	}
}

func TestHangingCheckerAnswersWithinBudget(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hang := &testChecker{targets: []Target{{Name: "a"}, {Name: "b"}}, behave: func(_ context.Context, target string) Verdict {
		if target == "b" {
			return Verdict{Reason: ReasonReady}
		}
		<-release // ignores ctx on purpose
		return Verdict{Reason: ReasonReady}
	}}
	t.Cleanup(func() { close(release) })
	e := newTestEngine(t, spec(ProviderKVM, "lab", hang))

	start := time.Now()
	res, err := e.Run(context.Background(), Request{ScrapeTimeout: time.Second, Offset: 500 * time.Millisecond})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Budget != 500*time.Millisecond {
		t.Errorf("budget = %v, want 500ms", res[0].Budget)
	}
	if got := res[0].Targets[0].Reason; got != ReasonTimeout {
		t.Errorf("hanging target: %s, want Timeout", got)
	}
	if got := res[0].Targets[1].Reason; got != ReasonReady {
		t.Errorf("other target: %s, want Ready", got)
	}
	// Nothing else will ever record a verdict for the stuck check.
	if st := e.Status()[0].Targets[0]; !st.Checked || st.Last.Reason != ReasonTimeout {
		t.Errorf("status of the stuck target: %+v, want a recorded Timeout", st)
	}
	// A generous bound: this catches "waits for the checker", not jitter.
	if elapsed > 5*time.Second {
		t.Errorf("Run took %v with a 500ms budget", elapsed)
	}
}

func TestErrorAfterDeadlineIsTimeout(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, spec(ProviderGCP, "g", &testChecker{targets: one("compute"), behave: slow(time.Hour)}))
	res, _ := e.Run(context.Background(), Request{ScrapeTimeout: 200 * time.Millisecond})
	if got := res[0].Targets[0].Reason; got != ReasonTimeout {
		t.Fatalf("reason = %s, want Timeout", got)
	}
	// The check itself (not only the caller) must end as Timeout, whatever
	// the checker said about its cancelled request.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		st := e.Status()[0].Targets[0]
		if st.Checked && st.Last.Reason == ReasonTimeout && strings.Contains(st.Last.Message, "Unreachable") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("recorded verdict = %+v, want the checker's Unreachable turned into Timeout", e.Status()[0].Targets[0].Last)
}

// A scrape whose client goes away must not record a Timeout for a check
// that then succeeds: ready would flap on the status page.
func TestCancelledCallerRecordsNothing(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, spec(ProviderGCP, "g", &testChecker{targets: one("compute"), behave: func(ctx context.Context, _ string) Verdict {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
		return Verdict{Reason: ReasonReady}
	}}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := e.Run(ctx, Request{})
	if err != nil {
		t.Fatal(err)
	}
	if got := res[0].Targets[0].Reason; got != ReasonTimeout {
		t.Errorf("cancelled caller got %s, want Timeout", got)
	}
	waitFor(t, func() bool { return e.Status()[0].Targets[0].Checked })
	st := e.Status()[0].Targets[0]
	if st.Last.Reason != ReasonReady || !st.LastTransition.Equal(st.Last.CheckedAt) {
		t.Errorf("status %+v: want Ready with its own check as the only transition", st)
	}
}

// A scrape with a longer timeout does not inherit the budget of a shorter
// scrape's check in flight, and nobody joins a check stuck past its deadline.
func TestNoJoiningAShorterOrStuckCheck(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var calls atomic.Int64
	c := &testChecker{targets: one("compute"), behave: func(ctx context.Context, _ string) Verdict {
		if calls.Add(1) == 1 {
			<-release // the first check is stuck, ignoring its context
			return Verdict{Reason: ReasonReady}
		}
		return Verdict{Reason: ReasonReady}
	}}
	e := newTestEngine(t, spec(ProviderGCP, "g", c))
	short := make(chan TargetResult, 1)
	go func() {
		res, _ := e.Run(context.Background(), Request{ScrapeTimeout: 400 * time.Millisecond})
		short <- res[0].Targets[0]
	}()
	waitFor(t, func() bool { return calls.Load() == 1 })
	// Starts while the short scrape's check is in flight.
	res, _ := e.Run(context.Background(), Request{ScrapeTimeout: 5 * time.Second})
	if got := res[0].Targets[0]; got.Mode != ModeLive || got.Reason != ReasonReady {
		t.Errorf("longer scrape: mode %s reason %s, want its own live check, Ready", got.Mode, got.Reason)
	}
	if got := <-short; got.Reason != ReasonTimeout {
		t.Errorf("short scrape: %s, want Timeout", got.Reason)
	}
	// The first check is still stuck, past its deadline: a new scrape runs
	// a check of its own instead of waiting on it.
	res, _ = e.Run(context.Background(), Request{ScrapeTimeout: 5 * time.Second})
	if got := res[0].Targets[0]; got.Mode != ModeLive || got.Reason != ReasonReady {
		t.Errorf("after the stuck check's deadline: mode %s reason %s, want live Ready", got.Mode, got.Reason)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("checker ran %d times, want 3", n)
	}
}

// A check that honours its context must hand its own verdict to the caller
// at the deadline, not lose the race to the caller's made-up Timeout: its
// message and facts are what the status page and debug output show.
func TestCheckVerdictWinsAtTheDeadline(t *testing.T) {
	t.Parallel()
	c := &testChecker{targets: one("beelink"), behave: func(ctx context.Context, _ string) Verdict {
		<-ctx.Done()
		return Verdict{Reason: ReasonTimeout, Message: "stage ssh-handshake", Facts: testFacts{"user": "proxyops"}}
	}}
	e := newTestEngine(t, spec(ProviderKVM, "lab", c))
	// A 1s budget leaves the check a 100ms grace: ample for a goroutine to
	// be scheduled even on a loaded machine.
	for i := range 5 {
		res, _ := e.Run(context.Background(), Request{ScrapeTimeout: time.Second})
		got := res[0].Targets[0]
		if got.Reason != ReasonTimeout || got.Message != "stage ssh-handshake" || got.Facts == nil || got.Facts.Details()["user"] != "proxyops" {
			t.Fatalf("scrape %d: %s %q %+v, want the check's own Timeout verdict", i+1, got.Reason, got.Message, got.Facts)
		}
	}
}

func TestConcurrentScrapesShareOneCheck(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 10)
	proceed := make(chan struct{})
	c := &testChecker{targets: one("compute"), behave: func(ctx context.Context, _ string) Verdict {
		entered <- struct{}{}
		select {
		case <-proceed:
		case <-ctx.Done():
		}
		return Verdict{Reason: ReasonReady}
	}}
	e := newTestEngine(t, spec(ProviderGCP, "g", c))

	results := make(chan TargetResult, 2)
	go func() {
		res, _ := e.Run(context.Background(), Request{})
		results <- res[0].Targets[0]
	}()
	<-entered // the first scrape's check is in flight
	go func() {
		res, _ := e.Run(context.Background(), Request{})
		results <- res[0].Targets[0]
	}()
	// Let the second scrape join before the check finishes.
	waitFor(t, func() bool { return e.checksOf(ProviderGCP, "g", ModeShared) == 1 })
	close(proceed)
	modes := map[string]int{}
	for range 2 {
		r := <-results
		modes[r.Mode]++
		if r.Reason != ReasonReady {
			t.Errorf("reason %s, want Ready", r.Reason)
		}
	}
	if n := c.calls.Load(); n != 1 {
		t.Errorf("checker ran %d times, want 1", n)
	}
	if modes[ModeLive] != 1 || modes[ModeShared] != 1 {
		t.Errorf("modes = %v, want one live and one shared", modes)
	}
}

func TestSharedCallerKeepsItsOwnDeadline(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	c := &testChecker{targets: one("apiserver"), behave: func(ctx context.Context, _ string) Verdict {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return Verdict{Reason: ReasonReady}
	}}
	e := newTestEngine(t, spec(ProviderKubernetes, "k", c))
	first := make(chan TargetResult, 1)
	go func() {
		res, _ := e.Run(context.Background(), Request{ScrapeTimeout: 20 * time.Second})
		first <- res[0].Targets[0]
	}()
	<-entered
	res, _ := e.Run(context.Background(), Request{ScrapeTimeout: 200 * time.Millisecond})
	if got := res[0].Targets[0]; got.Mode != ModeShared || got.Reason != ReasonTimeout {
		t.Errorf("short scrape: mode %s reason %s, want shared Timeout", got.Mode, got.Reason)
	}
	close(release)
	if got := <-first; got.Reason != ReasonReady || got.Mode != ModeLive {
		t.Errorf("long scrape: mode %s reason %s, want live Ready", got.Mode, got.Reason)
	}
}

func TestMinIntervalServesCachedVerdictWithItsAge(t *testing.T) {
	t.Parallel()
	c := &testChecker{targets: one("compute"), behave: verdictOf(ReasonReady)}
	s := spec(ProviderGCP, "g", c)
	s.MinInterval = time.Minute
	e := NewEngine(discard())
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	e.now = clock.Now
	e.SetProviders([]Spec{s})
	t.Cleanup(e.Close)

	first, _ := e.Run(context.Background(), Request{})
	checkedAt := first[0].Targets[0].CheckedAt
	clock.Advance(30 * time.Second)
	second, _ := e.Run(context.Background(), Request{})
	got := second[0].Targets[0]
	if got.Mode != ModeCached || !got.CheckedAt.Equal(checkedAt) {
		t.Errorf("within min_interval: mode %s checked at %v, want cached from %v", got.Mode, got.CheckedAt, checkedAt)
	}
	if n := c.calls.Load(); n != 1 {
		t.Errorf("checker ran %d times within min_interval, want 1", n)
	}
	clock.Advance(31 * time.Second)
	third, _ := e.Run(context.Background(), Request{})
	if got := third[0].Targets[0]; got.Mode != ModeLive || !got.CheckedAt.After(checkedAt) {
		t.Errorf("after min_interval: mode %s checked at %v, want a live check", got.Mode, got.CheckedAt)
	}
	if want := map[string]uint64{ModeLive: 2, ModeCached: 1}; third[0].Checks[ModeLive] != want[ModeLive] || third[0].Checks[ModeCached] != want[ModeCached] {
		t.Errorf("checks = %v, want %v", third[0].Checks, want)
	}
}

func TestDebugForcesLiveCheckAndCapturesLog(t *testing.T) {
	t.Parallel()
	c := &testChecker{targets: one("compute"), behave: verdictOf(ReasonReady)}
	s := spec(ProviderGCP, "g", c)
	s.MinInterval = time.Hour
	e := newTestEngine(t, s)
	if _, err := e.Run(context.Background(), Request{}); err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	h := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	res, err := e.Run(context.Background(), Request{Name: "g", Debug: h})
	if err != nil {
		t.Fatal(err)
	}
	if got := res[0].Targets[0].Mode; got != ModeLive {
		t.Errorf("debug mode = %s, want live despite min_interval", got)
	}
	if !strings.Contains(buf.String(), "test check") || !strings.Contains(buf.String(), "check done") {
		t.Errorf("debug log lacks the check's messages:\n%s", buf.String())
	}
}

func TestTransitionTimestamps(t *testing.T) {
	t.Parallel()
	var reason atomic.Value
	reason.Store(ReasonReady)
	c := &testChecker{targets: one("apiserver"), behave: func(context.Context, string) Verdict {
		return Verdict{Reason: reason.Load().(Reason)}
	}}
	e := NewEngine(discard())
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	e.now = clock.Now
	e.SetProviders([]Spec{spec(ProviderKubernetes, "k", c)})
	t.Cleanup(e.Close)

	run := func() TargetResult {
		res, _ := e.Run(context.Background(), Request{})
		return res[0].Targets[0]
	}
	first := run()
	if !first.LastTransition.Equal(first.CheckedAt) {
		t.Errorf("first verdict: transition %v, want its check time %v", first.LastTransition, first.CheckedAt)
	}
	clock.Advance(time.Minute)
	if got := run(); !got.LastTransition.Equal(first.CheckedAt) {
		t.Errorf("unchanged: transition moved to %v", got.LastTransition)
	}
	clock.Advance(time.Minute)
	reason.Store(ReasonForbidden)
	changed := run()
	if !changed.LastTransition.Equal(changed.CheckedAt) {
		t.Errorf("changed: transition %v, want %v", changed.LastTransition, changed.CheckedAt)
	}
	clock.Advance(time.Minute)
	// Another not-ready reason is no transition of ready.
	reason.Store(ReasonServerError)
	if got := run(); !got.LastTransition.Equal(changed.CheckedAt) {
		t.Errorf("reason change without ready change moved the transition to %v", got.LastTransition)
	}
}

func TestReloadAdoptsClosesAndKeepsCache(t *testing.T) {
	t.Parallel()
	oldKVM := &testChecker{targets: one("beelink"), behave: verdictOf(ReasonReady)}
	oldGCP := &testChecker{targets: one("compute"), behave: verdictOf(ReasonReady)}
	gone := &testChecker{targets: one("apiserver"), behave: verdictOf(ReasonReady)}
	g := spec(ProviderGCP, "g", oldGCP)
	g.MinInterval, g.Fingerprint = time.Hour, "v1"
	e := newTestEngine(t, spec(ProviderKVM, "lab", oldKVM), g, spec(ProviderKubernetes, "k", gone))
	if _, err := e.Run(context.Background(), Request{}); err != nil {
		t.Fatal(err)
	}

	newKVM := &testChecker{targets: one("beelink"), behave: verdictOf(ReasonReady)}
	newGCP := &testChecker{targets: one("compute"), behave: verdictOf(ReasonReady)}
	g2 := spec(ProviderGCP, "g", newGCP)
	g2.MinInterval, g2.Fingerprint = time.Hour, "v1"
	e.SetProviders([]Spec{spec(ProviderKVM, "lab", newKVM), g2})

	if newKVM.adopted != oldKVM {
		t.Error("new kvm checker did not adopt the old one")
	}
	for name, c := range map[string]*testChecker{"old kvm": oldKVM, "old gcp": oldGCP, "removed": gone} {
		if !c.closed.Load() {
			t.Errorf("%s checker not closed", name)
		}
	}
	if newKVM.closed.Load() || newGCP.closed.Load() {
		t.Error("a checker in force was closed")
	}
	res, err := e.Run(context.Background(), Request{Name: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if got := res[0].Targets[0].Mode; got != ModeCached || newGCP.calls.Load() != 0 {
		t.Errorf("unchanged gcp entry after reload: mode %s, %d calls; want the cached verdict", got, newGCP.calls.Load())
	}
	if _, err := e.Run(context.Background(), Request{Name: "k"}); err == nil {
		t.Error("removed provider still selectable")
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, spec(ProviderKVM, "lab", &testChecker{targets: one("beelink"), behave: verdictOf(ReasonReady)}))
	for _, tc := range []struct {
		req Request
		ok  bool
	}{
		{Request{}, true},
		{Request{Name: "lab"}, true},
		{Request{Name: "lab", Target: "beelink"}, true},
		{Request{Name: "nope"}, false},
		{Request{Name: "lab", Target: "nope"}, false},
		{Request{Target: "beelink"}, false},
	} {
		_, err := e.Run(context.Background(), tc.req)
		var lerr *LookupError
		if (err == nil) != tc.ok || (err != nil && !errors.As(err, &lerr)) {
			t.Errorf("Run(%+v) = %v, want ok=%v (or a *LookupError)", tc.req, err, tc.ok)
		}
	}
}

func TestNoGoroutineLeakAfterManyScrapes(t *testing.T) {
	// Not parallel: goleak looks at every goroutine of the process.
	c := &testChecker{targets: []Target{{Name: "a"}, {Name: "b"}, {Name: "c"}}, behave: func(ctx context.Context, target string) Verdict {
		switch target {
		case "a":
			return Verdict{Reason: ReasonReady}
		case "b":
			return slow(time.Hour)(ctx, target)
		default:
			return Verdict{Reason: ReasonUnreachable}
		}
	}}
	e := NewEngine(discard())
	e.SetProviders([]Spec{spec(ProviderKVM, "lab", c)})
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, _ = e.Run(context.Background(), Request{ScrapeTimeout: 100 * time.Millisecond, Offset: 10 * time.Millisecond})
		})
	}
	wg.Wait()
	e.Close()
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
}

func TestCollectGolden(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_700_000_000, 0)
	res := []ProviderResult{
		{
			Kind: ProviderGCP, Name: "crawl-prod", Budget: 2500 * time.Millisecond,
			Checks: map[string]uint64{ModeLive: 3, ModeCached: 1},
			Targets: []TargetResult{{
				Result: Result{
					Verdict:   Verdict{Reason: ReasonAPIDisabled},
					Target:    Target{Name: "compute", Address: "projects/crawl-prod-123"},
					CheckedAt: at, Duration: 250 * time.Millisecond,
				},
				Mode: ModeLive, LastTransition: at.Add(-time.Hour),
			}},
		},
	}
	want := `
# HELP provider_health_ready 1 when the provider can host proxies now.
# TYPE provider_health_ready gauge
provider_health_ready{name="crawl-prod",provider="gcp",target="compute"} 0
# HELP provider_health_up 1 when the provider's API answered at its own protocol level.
# TYPE provider_health_up gauge
provider_health_up{name="crawl-prod",provider="gcp",target="compute"} 1
# HELP provider_health_check_timeout_seconds The budget this scrape gave the check.
# TYPE provider_health_check_timeout_seconds gauge
provider_health_check_timeout_seconds{name="crawl-prod",provider="gcp"} 2.5
# HELP provider_health_exporter_checks_total Checks by mode: live (ran), shared (joined an in-flight check), cached (reused within min_interval).
# TYPE provider_health_exporter_checks_total counter
provider_health_exporter_checks_total{mode="cached",name="crawl-prod",provider="gcp"} 1
provider_health_exporter_checks_total{mode="live",name="crawl-prod",provider="gcp"} 3
provider_health_exporter_checks_total{mode="shared",name="crawl-prod",provider="gcp"} 0
# HELP provider_health_last_transition_timestamp_seconds When ready last changed; the first verdict counts.
# TYPE provider_health_last_transition_timestamp_seconds gauge
provider_health_last_transition_timestamp_seconds{name="crawl-prod",provider="gcp",target="compute"} 1.6999964e+09
`
	if err := testutil.CollectAndCompare(ResultCollector{Results: res}, strings.NewReader(want),
		"provider_health_up", "provider_health_ready", "provider_health_check_timeout_seconds",
		"provider_health_exporter_checks_total", "provider_health_last_transition_timestamp_seconds"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(ResultCollector{Results: res}, "provider_health_reason"); n != len(Reasons(ProviderGCP)) {
		t.Errorf("%d reason series, want %d", n, len(Reasons(ProviderGCP)))
	}
}

func BenchmarkRun(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("targets=%d", n), func(b *testing.B) {
			targets := make([]Target, n)
			for i := range targets {
				targets[i] = Target{Name: fmt.Sprintf("host-%d", i)}
			}
			e := NewEngine(discard())
			e.SetProviders([]Spec{spec(ProviderKVM, "lab", &testChecker{targets: targets, behave: verdictOf(ReasonReady)})})
			defer e.Close()
			b.ReportAllocs()
			for b.Loop() {
				res, err := e.Run(context.Background(), Request{})
				if err != nil {
					b.Fatal(err)
				}
				reg := prometheus.NewRegistry()
				reg.MustRegister(ResultCollector{Results: res})
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// checksOf reads a checks_total counter, for tests that wait on it.
func (e *Engine) checksOf(kind, name, mode string) uint64 {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if c := e.checks[checksKey{kind, name, mode}]; c != nil {
		return c.Load()
	}
	return 0
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{now: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// The recorded state, for tests: what the engine remembers of each target
// without checking anything.

// TargetStatus is the last known state of a target, for the status page.
type TargetStatus struct {
	Target         Target
	Checked        bool // false until the first verdict
	Last           Result
	LastTransition time.Time
}

// ProviderStatus is the last known state of a provider entry.
type ProviderStatus struct {
	Kind, Name string
	Targets    []TargetStatus
}

// Status returns the last known verdicts without checking anything.
func (e *Engine) Status() []ProviderStatus {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]ProviderStatus, 0, len(e.providers))
	for _, p := range e.providers {
		ps := ProviderStatus{Kind: p.Kind, Name: p.Name}
		for _, t := range p.targets {
			ts := TargetStatus{Target: t}
			if st := e.states[stateKey{p.Kind, p.Name, t.Name}]; st != nil {
				ts.Checked, ts.Last, ts.LastTransition = true, st.last, st.transition
			}
			ps.Targets = append(ps.Targets, ts)
		}
		out = append(out, ps)
	}
	return out
}

// testFacts are provider facts for the engine tests: details only, no
// metrics of their own.
type testFacts map[string]string

func (f testFacts) Collect(chan<- prometheus.Metric, string, string) {}
func (f testFacts) Details() map[string]string                       { return f }

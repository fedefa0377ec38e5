package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The engine tests run in synctest bubbles: time is fake, advances only
// when every goroutine of the test is blocked, and so the order of
// deadlines and verdicts is the same on an idle and on a loaded machine.

// testChecker is the test-only checker: per target it can be ready, not
// ready, slow (honouring ctx), hang (ignoring ctx until released) or panic.
type testChecker struct {
	targets []provider.Target
	behave  func(ctx context.Context, target string) provider.Verdict
	calls   atomic.Int64
	closed  atomic.Bool
	adoptMu sync.Mutex
	adopted provider.Checker
}

func (c *testChecker) Targets() []provider.Target { return c.targets }

func (c *testChecker) Check(ctx context.Context, logger *slog.Logger, target string) provider.Verdict {
	c.calls.Add(1)
	logger.Debug("test check", "target", target)
	return c.behave(ctx, target)
}

func (c *testChecker) Close() error { c.closed.Store(true); return nil }

func (c *testChecker) Adopt(old provider.Checker) {
	c.adoptMu.Lock()
	c.adopted = old
	c.adoptMu.Unlock()
}

var (
	_ provider.Checker = (*testChecker)(nil)
	_ provider.Closer  = (*testChecker)(nil)
	_ provider.Adopter = (*testChecker)(nil)
)

// testFacts are provider facts for the engine tests: details only.
type testFacts map[string]string

func (f testFacts) Collect(chan<- prometheus.Metric, string, string) {}
func (f testFacts) Details() map[string]string                       { return f }

func verdictOf(r provider.Reason) func(context.Context, string) provider.Verdict {
	return func(context.Context, string) provider.Verdict {
		return provider.Verdict{Reason: r, Message: "test says " + string(r)}
	}
}

// slow answers Ready after d, or, when ctx ends first, what a real client
// says of a cancelled request: not a timeout reason, which the framework
// must override.
func slow(d time.Duration) func(context.Context, string) provider.Verdict {
	return func(ctx context.Context, _ string) provider.Verdict {
		select {
		case <-time.After(d):
			return provider.Verdict{Reason: provider.ReasonReady}
		case <-ctx.Done():
			return provider.Verdict{Reason: provider.ReasonUnreachable, Message: ctx.Err().Error()}
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newTestEngine(t *testing.T, entries ...Entry) *Engine {
	t.Helper()
	e := NewEngine(discard())
	if err := e.Load(entries); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// The kinds and reasons of the test entries: names the real kinds use,
// declared here because the framework names no provider.
const (
	ProviderKubernetes = "kubernetes"
	ProviderGCP        = "gcp"
	ProviderKVM        = "kvm"

	ReasonAPIDisabled              provider.Reason = "APIDisabled"
	ReasonSSHMaterialInvalid       provider.Reason = "SSHMaterialInvalid"
	ReasonSSHAuthFailed            provider.Reason = "SSHAuthFailed"
	ReasonSSHHandshakeFailed       provider.Reason = "SSHHandshakeFailed"
	ReasonHostKeyUnknown           provider.Reason = "HostKeyUnknown"
	ReasonHostKeyMismatch          provider.Reason = "HostKeyMismatch"
	ReasonLibvirtSocketUnavailable provider.Reason = "LibvirtSocketUnavailable"
	ReasonLibvirtConnectFailed     provider.Reason = "LibvirtConnectFailed"
	ReasonLibvirtConnectionLost    provider.Reason = "LibvirtConnectionLost"
	ReasonPoolMissing              provider.Reason = "PoolMissing"
	ReasonPoolInactive             provider.Reason = "PoolInactive"
	ReasonPoolBuilding             provider.Reason = "PoolBuilding"
	ReasonPoolDegraded             provider.Reason = "PoolDegraded"
	ReasonPoolInaccessible         provider.Reason = "PoolInaccessible"
)

// testReasons is the reason set of every test entry, every reason the
// real kinds have, with their up flags: the framework emits whatever set
// an entry declares; the providers' own sets live in their packages.
func testReasons() provider.ReasonSet {
	return provider.AuthenticatedHTTPReasons(provider.ReasonDef{Reason: ReasonAPIDisabled, Up: true},
		provider.ReasonDef{Reason: ReasonSSHMaterialInvalid, Up: false}, provider.ReasonDef{Reason: ReasonSSHAuthFailed, Up: false},
		provider.ReasonDef{Reason: ReasonSSHHandshakeFailed, Up: false}, provider.ReasonDef{Reason: ReasonHostKeyUnknown, Up: false},
		provider.ReasonDef{Reason: ReasonHostKeyMismatch, Up: false}, provider.ReasonDef{Reason: ReasonLibvirtSocketUnavailable, Up: false},
		provider.ReasonDef{Reason: ReasonLibvirtConnectFailed, Up: true}, provider.ReasonDef{Reason: ReasonLibvirtConnectionLost, Up: false},
		provider.ReasonDef{Reason: ReasonPoolMissing, Up: true}, provider.ReasonDef{Reason: ReasonPoolInactive, Up: true},
		provider.ReasonDef{Reason: ReasonPoolBuilding, Up: true}, provider.ReasonDef{Reason: ReasonPoolDegraded, Up: true},
		provider.ReasonDef{Reason: ReasonPoolInaccessible, Up: true})
}

func entry(kind, name string, c provider.Checker) Entry {
	return Entry{Kind: kind, Name: name, Reasons: testReasons(), Timeout: 5 * time.Second,
		Build: func() (provider.Checker, error) { return c, nil }}
}

func one(target string) []provider.Target {
	return []provider.Target{{Name: target, Address: "addr-of-" + target}}
}

func runOne(t *testing.T, e *Engine, req Request) TargetResult {
	t.Helper()
	res, err := e.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Targets[0]
}

func status(t *testing.T, e *Engine) TargetResult {
	t.Helper()
	st, err := e.Status("")
	if err != nil {
		t.Fatal(err)
	}
	return st[0].Targets[0]
}

func TestRunVerdicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind      string
		reason    provider.Reason
		wantUp    bool
		wantReady bool
	}{
		{ProviderKubernetes, provider.ReasonReady, true, true},
		{ProviderKubernetes, provider.ReasonForbidden, true, false},
		{ProviderGCP, ReasonAPIDisabled, true, false},
		{ProviderGCP, provider.ReasonTLSError, false, false},
		{ProviderKVM, ReasonHostKeyMismatch, false, false},
		{ProviderKVM, ReasonPoolInactive, true, false},
		{ProviderKVM, ReasonLibvirtConnectFailed, true, false},
	} {
		t.Run(tc.kind+"/"+string(tc.reason), func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, entry(tc.kind, "n", &testChecker{targets: one("t"), behave: verdictOf(tc.reason)}))
			res, err := e.Run(context.Background(), Request{})
			if err != nil {
				t.Fatal(err)
			}
			got := res[0].Targets[0]
			if got.Reason != tc.reason || res[0].Reasons.Up(got.Reason) != tc.wantUp || got.Reason.Ready() != tc.wantReady {
				t.Errorf("got %s up=%v ready=%v, want %s up=%v ready=%v",
					got.Reason, res[0].Reasons.Up(got.Reason), got.Reason.Ready(), tc.reason, tc.wantUp, tc.wantReady)
			}
			assertOneReason(t, res, tc.reason)
		})
	}
}

// assertOneReason checks the reason family: one series for the target, its
// current reason, at 1; the rest of the set is not exported.
func assertOneReason(t *testing.T, res []ProviderResult, want provider.Reason) {
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
		if len(mf.GetMetric()) != 1 {
			t.Errorf("%d reason series, want 1", len(mf.GetMetric()))
		}
		for _, m := range mf.GetMetric() {
			if r := labelValue(m, "reason"); r != string(want) || m.GetGauge().GetValue() != 1 {
				t.Errorf("reason %q = %g, want %q = 1", r, m.GetGauge().GetValue(), want)
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
	// APIDisabled is a GCP reason; an entry whose set lacks it (as the
	// kubernetes set does) must not emit it.
	k := entry(ProviderKubernetes, "k", &testChecker{targets: one("apiserver"), behave: verdictOf(ReasonAPIDisabled)})
	k.Reasons = provider.AuthenticatedHTTPReasons()
	e := newTestEngine(t, k)
	res, _ := e.Run(context.Background(), Request{})
	if got := res[0].Targets[0].Reason; got != provider.ReasonUnknown {
		t.Fatalf("reason = %s, want Unknown", got)
	}
	assertOneReason(t, res, provider.ReasonUnknown)
}

func TestPanickingCheckerIsUnknownAndEngineKeepsServing(t *testing.T) {
	t.Parallel()
	boom := &testChecker{targets: one("t"), behave: func(context.Context, string) provider.Verdict { panic("kaboom") }}
	fine := &testChecker{targets: one("t"), behave: verdictOf(provider.ReasonReady)}
	e := newTestEngine(t, entry(ProviderKVM, "boom", boom), entry(ProviderGCP, "fine", fine))
	for range 3 {
		res, err := e.Run(context.Background(), Request{})
		if err != nil {
			t.Fatal(err)
		}
		if got := res[0].Targets[0]; got.Reason != provider.ReasonUnknown || !strings.Contains(got.Message, "kaboom") {
			t.Errorf("panicking checker: %s %q, want Unknown mentioning the panic", got.Reason, got.Message)
		}
		if got := res[1].Targets[0].Reason; got != provider.ReasonReady {
			t.Errorf("other provider: %s, want Ready", got)
		}
	}
}

// A checker that ignores its context does not hold the caller past its
// budget; its target gets a recorded Timeout, since nothing else will ever
// record one; and no second check of it starts while it is stuck.
func TestHangingCheckerAnswersWithinBudget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		hang := &testChecker{targets: []provider.Target{{Name: "a"}, {Name: "b"}}, behave: func(_ context.Context, target string) provider.Verdict {
			if target == "a" {
				<-release // ignores ctx on purpose
			}
			return provider.Verdict{Reason: provider.ReasonReady}
		}}
		e := newTestEngine(t, entry(ProviderKVM, "lab", hang))
		start := time.Now()
		res, err := e.Run(context.Background(), Request{ScrapeTimeout: time.Second, Offset: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if elapsed := time.Since(start); elapsed != 500*time.Millisecond {
			t.Errorf("Run took %v with a 500ms budget", elapsed)
		}
		if res[0].Budget != 500*time.Millisecond {
			t.Errorf("budget = %v, want 500ms", res[0].Budget)
		}
		if got := res[0].Targets[0].Reason; got != provider.ReasonTimeout {
			t.Errorf("hanging target: %s, want Timeout", got)
		}
		if got := res[0].Targets[1].Reason; got != provider.ReasonReady {
			t.Errorf("other target: %s, want Ready", got)
		}
		if st := status(t, e); !st.Checked || st.Reason != provider.ReasonTimeout {
			t.Errorf("status of the stuck target: %+v, want a recorded Timeout", st)
		}
		// At most one live check per target: the next scrape waits on
		// the stuck check instead of starting another.
		res, _ = e.Run(context.Background(), Request{ScrapeTimeout: time.Second})
		if got := res[0].Targets[0]; got.Mode != exposition.ModeShared || got.Reason != provider.ReasonTimeout {
			t.Errorf("second scrape: %s %s, want shared Timeout", got.Mode, got.Reason)
		}
		if n := hang.calls.Load(); n != 3 {
			t.Errorf("checker called %d times, want 3 (a once, b twice)", n)
		}
	})
}

// TestReserveEndsTheChecksEarlier: a request that reserves time for its
// answer has its checks end that much before the budget, at most a
// quarter of it, and its results say the budget the checks had.
func TestReserveEndsTheChecksEarlier(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ reserve, want time.Duration }{
		{0, 4 * time.Second},
		{300 * time.Millisecond, 3700 * time.Millisecond},
		{1500 * time.Microsecond, 3998 * time.Millisecond}, // rounded up to a millisecond
		{10 * time.Second, 3 * time.Second},                // a quarter at most
	} {
		synctest.Test(t, func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			hang := &testChecker{targets: one("a"), behave: func(context.Context, string) provider.Verdict {
				<-release // ignores ctx on purpose
				return provider.Verdict{Reason: provider.ReasonReady}
			}}
			e := newTestEngine(t, entry(ProviderKVM, "lab", hang))
			start := time.Now()
			res, err := e.Run(context.Background(), Request{ScrapeTimeout: 5 * time.Second, Offset: time.Second, Reserve: tc.reserve})
			if err != nil {
				t.Fatal(err)
			}
			if elapsed := time.Since(start); elapsed != tc.want || res[0].Budget != tc.want {
				t.Errorf("reserve %v: Run took %v, budget %v, want %v", tc.reserve, elapsed, res[0].Budget, tc.want)
			}
			if got := res[0].Targets[0].Reason; got != provider.ReasonTimeout {
				t.Errorf("reserve %v: %s, want Timeout", tc.reserve, got)
			}
		})
	}
}

func TestErrorAfterDeadlineIsTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, entry(ProviderGCP, "g", &testChecker{targets: one("compute"), behave: slow(time.Hour)}))
		got := runOne(t, e, Request{ScrapeTimeout: 200 * time.Millisecond})
		// The check's own verdict wins the race against the caller's
		// made-up one, and the checker's Unreachable becomes Timeout.
		if got.Reason != provider.ReasonTimeout || !strings.Contains(got.Message, "Unreachable") {
			t.Fatalf("verdict %s %q, want the checker's Unreachable turned into Timeout", got.Reason, got.Message)
		}
		synctest.Wait()
		if st := status(t, e); st.Reason != provider.ReasonTimeout || !strings.Contains(st.Message, "Unreachable") {
			t.Errorf("recorded verdict = %s %q, want the same", st.Reason, st.Message)
		}
	})
}

// A check that stops quietly at its deadline and then says Ready (as
// kube-scheduler's plugins do, which count nothing at a done context) is
// Timeout, its capacity dropped, and min_interval keeps the Timeout, never
// the late Ready.
func TestLateReadyIsTimeoutAndNotKept(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &testChecker{targets: one("cluster"), behave: func(ctx context.Context, _ string) provider.Verdict {
			<-ctx.Done()
			return provider.Verdict{Reason: provider.ReasonReady, Message: "1000 copies fit",
				Capacity: provider.Capacity{Known: true, Proxies: 1000, Binding: "nodes"}}
		}}
		en := entry(ProviderKubernetes, "k", c)
		en.MinInterval = time.Minute
		e := newTestEngine(t, en)
		first := runOne(t, e, Request{ScrapeTimeout: time.Second})
		if first.Reason != provider.ReasonTimeout || !strings.Contains(first.Message, "Ready: 1000 copies fit") || first.Capacity.Known {
			t.Fatalf("late Ready: %s %q capacity %v, want Timeout naming it, no capacity", first.Reason, first.Message, first.Capacity)
		}
		time.Sleep(30 * time.Second)
		got := runOne(t, e, Request{ScrapeTimeout: time.Second})
		if got.Mode != exposition.ModeCached || got.Reason != provider.ReasonTimeout || got.Capacity.Known {
			t.Errorf("within min_interval: mode %s %s capacity %v, want the cached Timeout", got.Mode, got.Reason, got.Capacity)
		}
		if st := status(t, e); st.Reason != provider.ReasonTimeout {
			t.Errorf("recorded verdict %s, want Timeout", st.Reason)
		}
	})
}

// A scrape whose client goes away must not record a Timeout for a check
// that then succeeds: ready would flap on the status page.
func TestCancelledCallerRecordsNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, entry(ProviderGCP, "g", &testChecker{targets: one("compute"), behave: slow(100 * time.Millisecond)}))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := e.Run(ctx, Request{})
		if err != nil {
			t.Fatal(err)
		}
		if got := res[0].Targets[0].Reason; got != provider.ReasonTimeout {
			t.Errorf("cancelled caller got %s, want Timeout", got)
		}
		if st := status(t, e); st.Checked {
			t.Errorf("status right after the cancelled caller: %+v, want never checked", st)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		st := status(t, e)
		if st.Reason != provider.ReasonReady || !st.LastTransition.Equal(st.CheckedAt) || len(st.Transitions) != 1 {
			t.Errorf("status %+v: want Ready with its own check as the only transition", st)
		}
	})
}

// A scrape with a longer timeout that finds a shorter scrape's check in
// flight waits for it (one live check per target) and, when it timed out,
// runs its own with the time it has left.
func TestLongerScrapeOutlivesAShorterCheck(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &testChecker{targets: one("compute"), behave: slow(time.Second)}
		e := newTestEngine(t, entry(ProviderGCP, "g", c))
		short := make(chan TargetResult, 1)
		go func() { short <- runOne(t, e, Request{ScrapeTimeout: 400 * time.Millisecond}) }()
		synctest.Wait() // the short scrape's check is in flight
		got := runOne(t, e, Request{ScrapeTimeout: 5 * time.Second})
		if got.Mode != exposition.ModeLive || got.Reason != provider.ReasonReady {
			t.Errorf("longer scrape: mode %s reason %s, want its own live check, Ready", got.Mode, got.Reason)
		}
		if got := <-short; got.Reason != provider.ReasonTimeout {
			t.Errorf("short scrape: %s, want Timeout", got.Reason)
		}
		if n := c.calls.Load(); n != 2 {
			t.Errorf("checker ran %d times, want 2", n)
		}
	})
}

// A check that honours its context hands its own verdict to the caller at
// the deadline, not the caller's made-up Timeout: its message and facts
// are what the status page and debug output show.
func TestCheckVerdictWinsAtTheDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &testChecker{targets: one("beelink"), behave: func(ctx context.Context, _ string) provider.Verdict {
			<-ctx.Done()
			return provider.Verdict{Reason: provider.ReasonTimeout, Message: "stage ssh-handshake", Facts: testFacts{"user": "proxyops"}}
		}}
		e := newTestEngine(t, entry(ProviderKVM, "lab", c))
		for i := range 5 {
			got := runOne(t, e, Request{ScrapeTimeout: time.Second})
			if got.Reason != provider.ReasonTimeout || got.Message != "stage ssh-handshake" || got.Facts == nil || got.Facts.Details()["user"] != "proxyops" {
				t.Fatalf("scrape %d: %s %q %+v, want the check's own Timeout verdict", i+1, got.Reason, got.Message, got.Facts)
			}
		}
	})
}

// Verdicts the engine made up carry the facts the checker keeps.
type keeper struct{ testChecker }

func (k *keeper) Facts(target string) provider.Facts { return testFacts{"kept": target} }

func TestMadeUpVerdictsCarryKeptFacts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		k := &keeper{testChecker{targets: one("beelink"), behave: func(context.Context, string) provider.Verdict { panic("boom") }}}
		e := newTestEngine(t, entry(ProviderKVM, "lab", k))
		if st := status(t, e); st.Checked || st.Facts == nil || st.Facts.Details()["kept"] != "beelink" {
			t.Errorf("unchecked target: checked=%v facts %v, want the kept facts", st.Checked, st.Facts)
		}
		if got := runOne(t, e, Request{}); got.Reason != provider.ReasonUnknown || got.Facts == nil || got.Facts.Details()["kept"] != "beelink" {
			t.Errorf("panic verdict: %s facts %v, want Unknown with the kept facts", got.Reason, got.Facts)
		}
	})
}

func TestConcurrentCallersShareOneCheck(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &testChecker{targets: one("compute"), behave: slow(time.Second)}
		e := newTestEngine(t, entry(ProviderGCP, "g", c))
		results := make(chan TargetResult, 10)
		for range 10 {
			go func() { results <- runOne(t, e, Request{}) }()
		}
		modes := map[string]int{}
		for range 10 {
			r := <-results
			modes[r.Mode]++
			if r.Reason != provider.ReasonReady {
				t.Errorf("reason %s, want Ready", r.Reason)
			}
		}
		if n := c.calls.Load(); n != 1 {
			t.Errorf("checker ran %d times, want 1", n)
		}
		if modes[exposition.ModeLive] != 1 || modes[exposition.ModeShared] != 9 {
			t.Errorf("modes = %v, want one live and nine shared", modes)
		}
	})
}

// Callers that go away leave one check running, never one each: the bound
// on background work.
func TestAbandonedCallersLeaveOneCheck(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &testChecker{targets: one("compute"), behave: slow(time.Second)}
		e := newTestEngine(t, entry(ProviderGCP, "g", c))
		var wg sync.WaitGroup
		for range 1000 {
			wg.Go(func() {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(50*time.Millisecond, cancel)
				res, err := e.Run(ctx, Request{Name: "g"})
				if err != nil || res[0].Targets[0].Reason != provider.ReasonTimeout {
					t.Errorf("abandoned caller got %v %v, want Timeout", res, err)
				}
			})
		}
		wg.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := c.calls.Load(); n != 1 {
			t.Errorf("1000 abandoned callers made %d checks, want 1", n)
		}
	})
}

func TestSharedCallerKeepsItsOwnDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &testChecker{targets: one("apiserver"), behave: slow(time.Second)}
		e := newTestEngine(t, entry(ProviderKubernetes, "k", c))
		first := make(chan TargetResult, 1)
		go func() { first <- runOne(t, e, Request{ScrapeTimeout: 20 * time.Second}) }()
		synctest.Wait()
		start := time.Now()
		got := runOne(t, e, Request{ScrapeTimeout: 200 * time.Millisecond})
		if got.Mode != exposition.ModeShared || got.Reason != provider.ReasonTimeout || time.Since(start) != 200*time.Millisecond {
			t.Errorf("short scrape: mode %s reason %s after %v, want shared Timeout at its own 200ms budget",
				got.Mode, got.Reason, time.Since(start))
		}
		if got := <-first; got.Reason != provider.ReasonReady || got.Mode != exposition.ModeLive {
			t.Errorf("long scrape: mode %s reason %s, want live Ready", got.Mode, got.Reason)
		}
	})
}

func TestMinIntervalServesCachedVerdictWithItsLog(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &testChecker{targets: one("compute"), behave: verdictOf(provider.ReasonReady)}
		en := entry(ProviderGCP, "g", c)
		en.MinInterval = time.Minute
		e := newTestEngine(t, en)
		first := runOne(t, e, Request{})
		if !strings.Contains(first.Log.String(), "test check") || !strings.Contains(first.Log.String(), "check done") {
			t.Errorf("live check's log lacks its messages:\n%s", first.Log.String())
		}
		time.Sleep(30 * time.Second)
		got := runOne(t, e, Request{})
		if got.Mode != exposition.ModeCached || !got.CheckedAt.Equal(first.CheckedAt) || got.Log != first.Log {
			t.Errorf("within min_interval: mode %s checked at %v, want cached from %v with its log", got.Mode, got.CheckedAt, first.CheckedAt)
		}
		time.Sleep(31 * time.Second)
		res, _ := e.Run(context.Background(), Request{})
		if got := res[0].Targets[0]; got.Mode != exposition.ModeLive || !got.CheckedAt.After(first.CheckedAt) {
			t.Errorf("after min_interval: mode %s checked at %v, want a live check", got.Mode, got.CheckedAt)
		}
		if n := c.calls.Load(); n != 2 {
			t.Errorf("checker ran %d times, want 2", n)
		}
		if res[0].Checks[exposition.ModeLive] != 2 || res[0].Checks[exposition.ModeCached] != 1 {
			t.Errorf("checks = %v, want live 2, cached 1", res[0].Checks)
		}
	})
}

func TestTransitions(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var reason atomic.Value
		reason.Store(provider.ReasonReady)
		c := &testChecker{targets: one("apiserver"), behave: func(context.Context, string) provider.Verdict {
			return provider.Verdict{Reason: reason.Load().(provider.Reason)}
		}}
		e := newTestEngine(t, entry(ProviderKubernetes, "k", c))
		first := runOne(t, e, Request{})
		if !first.LastTransition.Equal(first.CheckedAt) {
			t.Errorf("first verdict: transition %v, want its check time %v", first.LastTransition, first.CheckedAt)
		}
		time.Sleep(time.Minute)
		if got := runOne(t, e, Request{}); !got.LastTransition.Equal(first.CheckedAt) {
			t.Errorf("unchanged: transition moved to %v", got.LastTransition)
		}
		time.Sleep(time.Minute)
		reason.Store(provider.ReasonForbidden)
		changed := runOne(t, e, Request{})
		if !changed.LastTransition.Equal(changed.CheckedAt) {
			t.Errorf("changed: transition %v, want %v", changed.LastTransition, changed.CheckedAt)
		}
		time.Sleep(time.Minute)
		// Another not-ready reason is no transition of ready, but it is
		// one in the history.
		reason.Store(provider.ReasonServerError)
		if got := runOne(t, e, Request{}); !got.LastTransition.Equal(changed.CheckedAt) {
			t.Errorf("reason change without ready change moved the transition to %v", got.LastTransition)
		}
		want := []Transition{
			{first.CheckedAt, "", provider.ReasonReady},
			{changed.CheckedAt, provider.ReasonReady, provider.ReasonForbidden},
			{changed.CheckedAt.Add(time.Minute), provider.ReasonForbidden, provider.ReasonServerError},
		}
		if got := status(t, e).Transitions; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("transitions %v, want %v", got, want)
		}
		// Only the last ten are kept.
		for i := range 20 {
			reason.Store([]provider.Reason{provider.ReasonReady, provider.ReasonForbidden}[i%2])
			runOne(t, e, Request{})
		}
		if got := status(t, e).Transitions; len(got) != 10 || got[9].To != provider.ReasonForbidden {
			t.Errorf("after 20 changes: %d transitions ending %v, want the last 10", len(got), got[len(got)-1])
		}
	})
}

// Status reads; it never checks.
func TestStatusNeverChecks(t *testing.T) {
	t.Parallel()
	c := &testChecker{targets: one("compute"), behave: verdictOf(provider.ReasonReady)}
	e := newTestEngine(t, entry(ProviderGCP, "g", c))
	for range 3 {
		st, err := e.Status("")
		if err != nil {
			t.Fatal(err)
		}
		if tr := st[0].Targets[0]; tr.Checked || tr.Reason != "" || tr.Target.Address != "addr-of-compute" {
			t.Errorf("unchecked target: %+v, want never checked with its address", tr)
		}
	}
	if n := c.calls.Load(); n != 0 {
		t.Errorf("Status ran %d checks, want 0", n)
	}
	runOne(t, e, Request{})
	if st := status(t, e); !st.Checked || st.Reason != provider.ReasonReady || c.calls.Load() != 1 {
		t.Errorf("after a scrape: %+v, %d checks; want the scrape's Ready", st, c.calls.Load())
	}
	if _, err := e.Status("nope"); err == nil {
		t.Error("Status of an unknown name: no error")
	}
}

func TestReloadIsOneTransaction(t *testing.T) {
	t.Parallel()
	oldKVM := &testChecker{targets: one("beelink"), behave: verdictOf(provider.ReasonReady)}
	oldGCP := &testChecker{targets: one("compute"), behave: verdictOf(provider.ReasonReady)}
	gone := &testChecker{targets: one("apiserver"), behave: verdictOf(provider.ReasonReady)}
	builds := map[string]int{}
	counted := func(en Entry) Entry {
		b := en.Build
		en.Build = func() (provider.Checker, error) { builds[en.Name]++; return b() }
		return en
	}
	g := entry(ProviderGCP, "g", oldGCP)
	g.MinInterval, g.Fingerprint = time.Hour, "v1"
	kv := entry(ProviderKVM, "lab", oldKVM)
	kv.Fingerprint = "v1"
	e := newTestEngine(t, counted(kv), counted(g), counted(entry(ProviderKubernetes, "k", gone)))
	if _, err := e.Run(context.Background(), Request{}); err != nil {
		t.Fatal(err)
	}

	// A reload where one entry fails builds nothing that stays: the new
	// checker is closed and the old ones are untouched.
	newKVM := &testChecker{targets: one("beelink"), behave: verdictOf(provider.ReasonReady)}
	kv2 := entry(ProviderKVM, "lab", newKVM)
	kv2.Fingerprint = "v2"
	bad := Entry{Kind: ProviderGCP, Name: "bad", Reasons: testReasons(), Build: func() (provider.Checker, error) { return nil, errors.New("no project") }}
	if err := e.Load([]Entry{counted(kv2), g, bad}); err == nil || err.Error() != `gcp "bad": no project` {
		t.Fatalf("failed reload: %v, want the entry's error", err)
	}
	if !newKVM.closed.Load() || oldKVM.closed.Load() || newKVM.adopted != nil || gone.closed.Load() {
		t.Error("a failed reload changed what runs")
	}
	if _, err := e.Run(context.Background(), Request{Name: "k"}); err != nil {
		t.Errorf("after a failed reload: %v", err)
	}

	newKVM = &testChecker{targets: one("beelink"), behave: verdictOf(provider.ReasonReady)}
	kv2 = entry(ProviderKVM, "lab", newKVM)
	kv2.Fingerprint = "v2"
	if err := e.Load([]Entry{counted(kv2), counted(g)}); err != nil {
		t.Fatal(err)
	}
	if newKVM.adopted != oldKVM {
		t.Error("new kvm checker did not adopt the old one")
	}
	if builds["g"] != 1 {
		t.Errorf("unchanged gcp entry built %d times, want once", builds["g"])
	}
	for name, c := range map[string]*testChecker{"old kvm": oldKVM, "removed": gone} {
		if !c.closed.Load() {
			t.Errorf("%s checker not closed", name)
		}
	}
	if newKVM.closed.Load() || oldGCP.closed.Load() {
		t.Error("a checker in force was closed")
	}
	if got := runOne(t, e, Request{Name: "g"}); got.Mode != exposition.ModeCached || oldGCP.calls.Load() != 1 {
		t.Errorf("unchanged gcp entry after reload: mode %s, %d calls; want the cached verdict", got.Mode, oldGCP.calls.Load())
	}
	if _, err := e.Run(context.Background(), Request{Name: "k"}); err == nil {
		t.Error("removed provider still selectable")
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, entry(ProviderKVM, "lab", &testChecker{targets: one("beelink"), behave: verdictOf(provider.ReasonReady)}))
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

// Every goroutine a scrape starts ends with its check: synctest.Test fails
// if any is left in the bubble when it returns.
func TestNoGoroutineLeakAfterManyScrapes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &testChecker{targets: []provider.Target{{Name: "a"}, {Name: "b"}, {Name: "c"}}, behave: func(ctx context.Context, target string) provider.Verdict {
			switch target {
			case "a":
				return provider.Verdict{Reason: provider.ReasonReady}
			case "b":
				return slow(time.Hour)(ctx, target)
			default:
				return provider.Verdict{Reason: provider.ReasonUnreachable}
			}
		}}
		e := NewEngine(discard())
		if err := e.Load([]Entry{entry(ProviderKVM, "lab", c)}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				_, _ = e.Run(context.Background(), Request{ScrapeTimeout: 100 * time.Millisecond, Offset: 10 * time.Millisecond})
			})
		}
		wg.Wait()
		e.Close()
	})
}

func TestCollectGolden(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_700_000_000, 0)
	res := []ProviderResult{
		{
			Provider: exposition.Provider{
				Kind: ProviderGCP, Name: "crawl-prod", Reasons: testReasons(), Budget: 2500 * time.Millisecond,
				Checks: map[string]uint64{exposition.ModeLive: 3, exposition.ModeCached: 1},
			},
			Targets: []TargetResult{{
				Series: exposition.Series{
					Result: exposition.Result{
						Verdict:   provider.Verdict{Reason: ReasonAPIDisabled},
						Target:    provider.Target{Name: "compute", Address: "projects/crawl-prod-123"},
						CheckedAt: at, Duration: 250 * time.Millisecond,
					},
					LastTransition: at.Add(-time.Hour),
				},
				Mode: exposition.ModeLive,
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
# HELP provider_health_exporter_checks_total Checks by mode: live (ran), shared (joined an in-flight check), cached (reused within min_interval), backoff (last verdict of a target whose recent dials failed, not redialed yet).
# TYPE provider_health_exporter_checks_total counter
provider_health_exporter_checks_total{mode="backoff",name="crawl-prod",provider="gcp"} 0
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
	if n := testutil.CollectAndCount(ResultCollector{Results: res}, "provider_health_reason"); n != 1 {
		t.Errorf("%d reason series, want 1: the target's current reason", n)
	}
}

// BenchmarkRun measures Engine.Run alone, without the metrics of the
// answer, for checks that cost nothing: live (every target checked) and
// cached (min_interval 1h, every verdict reused).
func BenchmarkRun(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		for _, cached := range []bool{true, false} {
			mode := map[bool]string{true: "cached", false: "live"}[cached]
			b.Run(fmt.Sprintf("targets=%d/%s", n, mode), func(b *testing.B) {
				targets := make([]provider.Target, n)
				for i := range targets {
					targets[i] = provider.Target{Name: fmt.Sprintf("host-%d", i)}
				}
				en := entry(ProviderKVM, "lab", &testChecker{targets: targets, behave: verdictOf(provider.ReasonReady)})
				if cached {
					en.MinInterval = time.Hour
				}
				e := NewEngine(discard())
				if err := e.Load([]Entry{en}); err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				req := Request{ScrapeTimeout: 5 * time.Second, Offset: 500 * time.Millisecond}
				if _, err := e.Run(context.Background(), req); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := e.Run(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// backoffChecker holds a target back for a minute after each failed check,
// as kvm does after failed dials.
type backoffChecker struct {
	testChecker
	mu        sync.Mutex
	notBefore time.Time
}

func (c *backoffChecker) NotBefore(string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.notBefore
}

var _ provider.Backoffer = (*backoffChecker)(nil)

func TestBackoffServesTheLastVerdict(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var reason atomic.Value
		reason.Store(provider.ReasonUnreachable)
		c := &backoffChecker{}
		c.testChecker = testChecker{targets: one("beelink"), behave: func(context.Context, string) provider.Verdict {
			r := reason.Load().(provider.Reason)
			c.mu.Lock()
			defer c.mu.Unlock()
			if r.Ready() {
				c.notBefore = time.Time{}
			} else {
				c.notBefore = time.Now().Add(time.Minute)
			}
			return provider.Verdict{Reason: r, Message: "test says " + string(r)}
		}}
		e := newTestEngine(t, entry(ProviderKVM, "lab", c))
		first := runOne(t, e, Request{})
		if first.Mode != exposition.ModeLive || first.Reason != provider.ReasonUnreachable {
			t.Fatalf("first scrape: mode %s reason %s, want a live Unreachable", first.Mode, first.Reason)
		}
		time.Sleep(30 * time.Second)
		reason.Store(provider.ReasonReady) // the host is back, but not asked yet
		got := runOne(t, e, Request{})
		if got.Mode != exposition.ModeBackoff || got.Reason != provider.ReasonUnreachable || !got.CheckedAt.Equal(first.CheckedAt) || got.Log != first.Log {
			t.Errorf("backing off: mode %s reason %s checked at %v, want backoff serving the verdict of %v with its log", got.Mode, got.Reason, got.CheckedAt, first.CheckedAt)
		}
		if until := status(t, e).BackoffUntil; !until.Equal(first.CheckedAt.Add(time.Minute)) {
			t.Errorf("status: backoff until %v, want %v", until, first.CheckedAt.Add(time.Minute))
		}
		time.Sleep(31 * time.Second)
		res, err := e.Run(context.Background(), Request{})
		if err != nil {
			t.Fatal(err)
		}
		if got := res[0].Targets[0]; got.Mode != exposition.ModeLive || got.Reason != provider.ReasonReady {
			t.Errorf("after the backoff: mode %s reason %s, want a live Ready", got.Mode, got.Reason)
		}
		if until := status(t, e).BackoffUntil; !until.IsZero() {
			t.Errorf("status after the backoff: backoff until %v, want none", until)
		}
		if n := c.calls.Load(); n != 2 {
			t.Errorf("checker ran %d times, want 2", n)
		}
		if res[0].Checks[exposition.ModeLive] != 2 || res[0].Checks[exposition.ModeBackoff] != 1 {
			t.Errorf("checks = %v, want live 2, backoff 1", res[0].Checks)
		}
	})
}

// TestBackoffNeedsAVerdict: a target held back before it has any verdict
// (a reload made a new checker) is checked: there is nothing to serve.
func TestBackoffNeedsAVerdict(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &backoffChecker{notBefore: time.Now().Add(time.Hour)}
		c.testChecker = testChecker{targets: one("beelink"), behave: verdictOf(provider.ReasonReady)}
		e := newTestEngine(t, entry(ProviderKVM, "lab", c))
		if got := runOne(t, e, Request{}); got.Mode != exposition.ModeLive || got.Reason != provider.ReasonReady {
			t.Errorf("mode %s reason %s, want a live Ready", got.Mode, got.Reason)
		}
	})
}

// TestCheckLogIsWhatATextHandlerWrites pins the debug log of a check,
// formatted when read, to what a slog.TextHandler at debug level writes
// when the lines are logged; and the engine's own handler still gets
// what its level lets through.
func TestCheckLogIsWhatATextHandlerWrites(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) { // one clock reading for both
		var want, main bytes.Buffer
		ref := slog.New(slog.NewTextHandler(&want, &slog.HandlerOptions{Level: slog.LevelDebug})).
			With("provider", "kvm", "name", "lab", "target", "h1")
		l := &CheckLog{}
		mainHandler := slog.NewTextHandler(&main, &slog.HandlerOptions{Level: slog.LevelInfo})
		got := slog.New(l.handler(mainHandler, "provider", "kvm", "name", "lab", "target", "h1"))
		for _, lg := range []*slog.Logger{ref, got} {
			lg.Debug("dialing", "addr", "127.0.0.1:22", "n", 3)
			lg.With("stage", "tcp").WithGroup("g").Info("failed", "err", errors.New("connection refused"), "after", time.Second)
			lg.Log(context.Background(), slog.LevelDebug-4, "below debug: not in the log")
			lg.WithGroup("").With().Warn("odd \"quoted\"\nmessage", slog.Group("pool", "name", "default", "state", 2))
		}
		l.close()
		got.Error("after the check: not its log")
		if l.String() != want.String() {
			t.Errorf("check log:\n%s\nwant:\n%s", l.String(), want.String())
		}
		if !strings.Contains(main.String(), "msg=failed") || strings.Contains(main.String(), "dialing") ||
			!strings.Contains(main.String(), "after the check") {
			t.Errorf("engine log got:\n%s\nwant the info and error lines only", main.String())
		}
		if (*CheckLog)(nil).String() != "" {
			t.Error("a nil CheckLog is not empty")
		}
	})
}

// TestStuckCheckIsAbandoned: a check that ignores its context is abandoned
// once it is past its deadline plus the grace, the next scrape starts a
// fresh one, and at MaxAbandoned still running the target reports Timeout
// without starting another, until they return.
func TestStuckCheckIsAbandoned(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		free := sync.OnceFunc(func() { close(release) })
		defer free()
		hang := &testChecker{targets: one("a"), behave: func(context.Context, string) provider.Verdict {
			<-release // ignores ctx on purpose
			return provider.Verdict{Reason: provider.ReasonReady}
		}}
		e := newTestEngine(t, entry(ProviderKVM, "lab", hang))
		req := Request{ScrapeTimeout: time.Second, Offset: 500 * time.Millisecond}
		scrape := func() (TargetResult, uint64) {
			t.Helper()
			res, err := e.Run(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			return res[0].Targets[0], res[0].Abandoned
		}

		tr, n := scrape()
		if tr.Reason != provider.ReasonTimeout || !strings.Contains(tr.Message, "did not return") || n != 0 {
			t.Fatalf("first scrape: %s %q, abandoned %d; want Timeout saying the check did not return, 0", tr.Reason, tr.Message, n)
		}
		// Within the grace, a scrape still joins the stuck check.
		if tr, n = scrape(); tr.Mode != exposition.ModeShared || n != 0 {
			t.Fatalf("scrape within the grace: mode %s, abandoned %d; want shared, 0", tr.Mode, n)
		}
		for i := 1; i < provider.MaxAbandoned; i++ {
			time.Sleep(provider.AbandonGrace + time.Second)
			tr, n = scrape()
			if tr.Mode != exposition.ModeLive || tr.Reason != provider.ReasonTimeout || n != uint64(i) {
				t.Fatalf("scrape after the grace #%d: %s %s, abandoned %d; want a live Timeout, %d", i, tr.Mode, tr.Reason, n, i)
			}
		}
		if got := hang.calls.Load(); got != provider.MaxAbandoned {
			t.Fatalf("checker called %d times, want %d (one per scrape that abandoned the one before)", got, provider.MaxAbandoned)
		}
		// The last one is overdue too: abandoning it reaches the bound,
		// and the target says so and starts nothing, then and after.
		for range 2 {
			time.Sleep(provider.AbandonGrace + time.Second)
			tr, n = scrape()
			if tr.Reason != provider.ReasonTimeout || !strings.Contains(tr.Message, "abandoned checks of this target have not returned") {
				t.Fatalf("at the bound: %s %q, want Timeout naming the abandoned checks", tr.Reason, tr.Message)
			}
			if got := hang.calls.Load(); got != provider.MaxAbandoned || n != provider.MaxAbandoned {
				t.Fatalf("at the bound: checker called %d times, abandoned %d; want %d and %d", got, n, provider.MaxAbandoned, provider.MaxAbandoned)
			}
		}
		// The callee returns: the late verdicts are dropped, and the next
		// scrape checks afresh.
		free()
		synctest.Wait()
		time.Sleep(provider.AbandonGrace + time.Second)
		if tr, _ = scrape(); tr.Reason != provider.ReasonReady || tr.Mode != exposition.ModeLive {
			t.Fatalf("after the callee returned: %s %s, want a live Ready", tr.Mode, tr.Reason)
		}
	})
}

// stuckCloser is a checker whose Close never returns until released.
type stuckCloser struct {
	testChecker
	release chan struct{}
}

func (c *stuckCloser) Close() error { <-c.release; return nil }

// TestCloseIsBounded: a checker whose Close hangs holds neither a reload
// nor shutdown longer than CloseBound, and other checkers are closed.
func TestCloseIsBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		stuck := &stuckCloser{testChecker: testChecker{targets: one("a"), behave: verdictOf(provider.ReasonReady)}, release: make(chan struct{})}
		defer close(stuck.release)
		other := &testChecker{targets: one("b"), behave: verdictOf(provider.ReasonReady)}
		e := NewEngine(discard())
		if err := e.Load([]Entry{entry(ProviderKVM, "lab", stuck), entry(ProviderGCP, "g", other)}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		e.Close()
		if took := time.Since(start); took != provider.CloseBound {
			t.Errorf("Close took %v, want the bound %v", took, provider.CloseBound)
		}
		if !other.closed.Load() {
			t.Error("the other checker was not closed")
		}
	})
}

// TestLoadRefusesIncompleteReasonSet: the engine itself reports Ready,
// Timeout and Unknown, so a set without one of them would export a state
// set with every series at 0; Load refuses it and says what is missing.
func TestLoadRefusesIncompleteReasonSet(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  provider.ReasonSet
		want string
	}{
		{provider.ReasonSet{{Reason: provider.ReasonReady, Up: true}, {Reason: provider.ReasonTimeout, Up: false}}, "reason set lacks Unknown"},
		{provider.ReasonSet{{Reason: provider.ReasonReady, Up: true}, {Reason: provider.ReasonUnknown, Up: false}}, "reason set lacks Timeout"},
		{provider.ReasonSet{{Reason: provider.ReasonTimeout, Up: false}, {Reason: provider.ReasonUnknown, Up: false}}, "reason set lacks Ready"},
		{provider.ReasonSet{{Reason: provider.ReasonReady, Up: false}, {Reason: provider.ReasonTimeout, Up: false}, {Reason: provider.ReasonUnknown, Up: false}}, "reason Ready must have up=true"},
		{append(testReasons(), provider.ReasonDef{Reason: provider.ReasonReady, Up: true}), `reason "Ready" is in the set twice`},
		{append(testReasons(), provider.ReasonDef{Reason: "Not ready", Up: false}), `reason "Not ready" is not a CamelCase word`},
	} {
		e := NewEngine(slog.New(slog.DiscardHandler))
		en := entry("toy", "t1", &testChecker{targets: one("x")})
		en.Reasons = tc.set
		err := e.Load([]Entry{en})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), `toy "t1": `) {
			t.Errorf("Load with %v: %v, want an error with %q", tc.set.Reasons(), err, tc.want)
		}
		e.Close()
	}
	e := newTestEngine(t, entry("toy", "t1", &testChecker{targets: one("x")}))
	if _, err := e.Run(context.Background(), Request{}); err != nil {
		t.Fatal(err)
	}
}

package engine

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestJoinRechecksTheCache: the interleaving behind the min_interval race
// (TestMinIntervalOneLiveCheck), made to happen every time instead of
// when a loaded machine preempts a scrape at the wrong moment. A scrape
// finds no verdict to reuse; another scrape's check then ends, with a
// verdict fresh for min_interval; the first scrape's join, which decides
// under the target's lock, serves that verdict (mode cached) instead of
// starting a second live check.
func TestJoinRechecksTheCache(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &testChecker{targets: one("apiserver"), behave: verdictOf(provider.ReasonReady)}
		en := entry(ProviderKubernetes, "k", c)
		en.MinInterval = time.Minute
		e := newTestEngine(t, en)
		ps, err := e.selectProviders(Request{})
		if err != nil {
			t.Fatal(err)
		}
		p, tg := ps[0], c.targets[0]
		st := p.states.of(tg.Name)
		if _, ok := e.reuse(p, st, tg); ok {
			t.Fatal("a verdict to reuse before any check")
		}
		// The other scrape, start to end, between this one's reuse and
		// its join.
		if got := runOne(t, e, Request{}); got.Mode != exposition.ModeLive {
			t.Fatalf("the other scrape: mode %s, want live", got.Mode)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tr, call, mode, ok := e.join(ctx, p, st, tg)
		if !ok {
			// Let the second check end before the bubble does.
			e.await(ctx, p, st, tg, call, mode)
			t.Fatalf("join started a check (mode %s) of a target checked just now, min_interval 1m", mode)
		}
		if tr.Mode != exposition.ModeCached || tr.Reason != provider.ReasonReady {
			t.Errorf("join: mode %s reason %s, want the cached Ready", tr.Mode, tr.Reason)
		}
		if n := c.calls.Load(); n != 1 {
			t.Errorf("%d live checks, want 1", n)
		}
	})
}

// TestBackoffJoinsACheckInFlight: a target whose checker holds it back
// (Backoffer) while a check of it is in flight is not served its last
// verdict: a scrape then joins the check in flight (mode shared) and gets
// what that check finds, not the older verdict the backoff would serve.
// Here the check sets the backoff (as kvm's does when its dial fails)
// and answers a second later.
func TestBackoffJoinsACheckInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := &backoffChecker{}
		c.testChecker = testChecker{targets: one("beelink"), behave: func(context.Context, string) provider.Verdict {
			if c.calls.Load() == 1 {
				return provider.Verdict{Reason: provider.ReasonReady}
			}
			c.mu.Lock()
			c.notBefore = time.Now().Add(time.Minute)
			c.mu.Unlock()
			time.Sleep(time.Second)
			return provider.Verdict{Reason: provider.ReasonUnreachable, Message: "dial failed"}
		}}
		e := newTestEngine(t, entry(ProviderKVM, "lab", c))
		if got := runOne(t, e, Request{}); got.Mode != exposition.ModeLive || got.Reason != provider.ReasonReady {
			t.Fatalf("first scrape: mode %s reason %s, want a live Ready", got.Mode, got.Reason)
		}
		first := make(chan TargetResult, 1)
		go func() {
			res, err := e.Run(context.Background(), Request{})
			if err != nil {
				t.Error(err)
			}
			first <- res[0].Targets[0]
		}()
		synctest.Wait() // the second check is in flight, backing off
		if got := runOne(t, e, Request{}); got.Mode != exposition.ModeShared || got.Reason != provider.ReasonUnreachable {
			t.Errorf("a scrape during the check in flight: mode %s reason %s, want the shared check's Unreachable", got.Mode, got.Reason)
		}
		if got := <-first; got.Mode != exposition.ModeLive || got.Reason != provider.ReasonUnreachable {
			t.Errorf("the scrape that started the check: mode %s reason %s, want a live Unreachable", got.Mode, got.Reason)
		}
		// Once it has ended, the backoff serves its verdict.
		if got := runOne(t, e, Request{}); got.Mode != exposition.ModeBackoff || got.Reason != provider.ReasonUnreachable {
			t.Errorf("after the check: mode %s reason %s, want backoff serving Unreachable", got.Mode, got.Reason)
		}
		if n := c.calls.Load(); n != 2 {
			t.Errorf("%d checks, want 2", n)
		}
	})
}

package engine

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestMinIntervalOneLiveCheck: scrapes that arrive together, with
// min_interval set, make one live check; the others share it or reuse its
// verdict. Before the fix, a scrape that found no verdict to reuse took
// the target's lock a second time to start its check, and when the first
// check ended in between (a loaded machine, a check of a few
// milliseconds), it started a second live check of a target with a
// fresh verdict: two requests, checks_total{mode="live"} 2. The cache and
// the in-flight check are now looked at under one lock (join). Each round
// runs in a synctest bubble: the scrapes start together, and the round
// ends when every goroutine of it has. The old two-lock join with a
// time.Sleep between its locks (the scrape's thread preempted there, which
// in the bubble lets the first check end) fails this test in its first
// round; the one-lock join with the same sleep before its lock passes.
func TestMinIntervalOneLiveCheck(t *testing.T) {
	t.Parallel()
	for round := range 300 {
		synctest.Test(t, func(t *testing.T) {
			c := &testChecker{targets: one("apiserver"), behave: verdictOf(provider.ReasonReady)}
			en := entry(ProviderKubernetes, "k", c)
			en.MinInterval = time.Minute
			e := newTestEngine(t, en)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for range 6 {
				wg.Go(func() {
					<-start
					if _, err := e.Run(context.Background(), Request{}); err != nil {
						t.Error(err)
					}
				})
			}
			close(start)
			wg.Wait()
			if n := c.calls.Load(); n != 1 {
				t.Fatalf("round %d: %d live checks of a target with min_interval, want 1", round, n)
			}
		})
	}
}

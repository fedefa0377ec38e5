package kvm

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestDialQueue: at most slots dials run at once; hosts whose last dial
// failed run after every other waiting host and never hold more than half
// the slots, so the others always find a slot coming free.
func TestDialQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu      sync.Mutex
			running = map[string]chan struct{}{} // name -> release
		)
		q := newDialQueue(4, 3*time.Second, func(j *dialJob) dialOutcome {
			release := make(chan struct{})
			mu.Lock()
			running[j.h.name] = release
			mu.Unlock()
			<-release
			return dialOutcome{kind: dialNeutral}
		})
		push := func(name string, failing bool) {
			t.Helper()
			if !q.push(&dialJob{h: &host{name: name}, failing: failing, done: make(chan struct{})}) {
				t.Fatalf("push %s: queue closed", name)
			}
		}
		finish := func(name string) {
			t.Helper()
			mu.Lock()
			release := running[name]
			delete(running, name)
			mu.Unlock()
			if release == nil {
				t.Fatalf("%s is not running", name)
			}
			close(release)
			synctest.Wait()
		}
		names := func() map[string]bool {
			mu.Lock()
			defer mu.Unlock()
			out := map[string]bool{}
			for n := range running {
				out[n] = true
			}
			return out
		}

		for _, n := range []string{"bad1", "bad2", "bad3", "bad4"} {
			push(n, true)
		}
		synctest.Wait()
		if got := names(); len(got) != 2 || !got["bad1"] || !got["bad2"] {
			t.Fatalf("running %v, want bad1 and bad2 only: failing hosts hold at most half the slots", got)
		}
		for _, n := range []string{"ok1", "ok2", "ok3"} {
			push(n, false)
		}
		synctest.Wait()
		if got := names(); len(got) != 4 || !got["ok1"] || !got["ok2"] {
			t.Fatalf("running %v, want bad1, bad2, ok1, ok2", got)
		}
		// A failing host's slot goes to the fresh host still waiting,
		// not to the next failing one.
		finish("bad1")
		if got := names(); !got["ok3"] || got["bad3"] {
			t.Fatalf("running %v, want ok3 before bad3", got)
		}
		finish("ok1")
		if got := names(); !got["bad3"] {
			t.Fatalf("running %v, want bad3 once no fresh host waits", got)
		}
		for _, n := range []string{"bad2", "ok2", "ok3", "bad3"} {
			finish(n)
		}
		finish("bad4")
		if len(names()) != 0 {
			t.Fatalf("still running: %v", names())
		}
		if q.maxRunning != 4 || q.maxFailingAtOnce != 2 {
			t.Errorf("at most %d dials, %d failing at once; want 4 and 2", q.maxRunning, q.maxFailingAtOnce)
		}
		// Closing ends the waiting jobs unstarted and waits for the
		// running ones.
		push("slow", false)
		synctest.Wait()
		waiting := &dialJob{h: &host{name: "late"}, done: make(chan struct{})}
		for _, n := range []string{"f1", "f2", "f3"} {
			push(n, false)
		}
		q.push(waiting)
		var ended []string
		closed := make(chan struct{})
		go func() {
			q.close(func(j *dialJob, err error) {
				if !errors.Is(err, errClosed) {
					t.Errorf("%s ended with %v, want errClosed", j.h.name, err)
				}
				ended = append(ended, j.h.name)
			})
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("close returned while dials were running")
		default:
		}
		for n := range names() {
			finish(n)
		}
		<-closed
		if len(ended) != 1 || ended[0] != "late" {
			t.Errorf("ended unstarted: %v, want [late]", ended)
		}
		if q.push(&dialJob{h: &host{name: "after"}, done: make(chan struct{})}) {
			t.Error("push after close was accepted")
		}
	})
}

// TestDialWindow: the window starts at startWindow, grows by one with every
// quick dial (within twice the quickest) up to max_concurrent_dials, narrows
// by one with every slow one (beyond four times the quickest), halves with
// every fresh host's dial that timed out, never below where it started, and
// is left alone by dials in between, other failures, and the timeouts of
// hosts already known to fail.
func TestDialWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu      sync.Mutex
			running = map[*dialJob]chan dialOutcome{}
		)
		q := newDialQueue(40, 3*time.Second, func(j *dialJob) dialOutcome {
			end := make(chan dialOutcome)
			mu.Lock()
			running[j] = end
			mu.Unlock()
			return <-end
		})
		push := func(n int, failing bool) {
			for range n {
				q.push(&dialJob{h: &host{name: "h"}, failing: failing, done: make(chan struct{})})
			}
			synctest.Wait()
		}
		// end finishes n running dials with outcome o.
		end := func(n int, o dialOutcome) {
			t.Helper()
			mu.Lock()
			var ends []chan dialOutcome
			for j, e := range running {
				if len(ends) == n {
					break
				}
				ends = append(ends, e)
				delete(running, j)
			}
			mu.Unlock()
			if len(ends) != n {
				t.Fatalf("%d dials running, want at least %d", len(ends), n)
			}
			for _, e := range ends {
				e <- o
				synctest.Wait()
			}
		}
		count := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(running)
		}
		window := func() int {
			q.mu.Lock()
			defer q.mu.Unlock()
			return q.window
		}
		quick := dialOutcome{kind: dialEstablished, took: 80 * time.Millisecond}
		between := dialOutcome{kind: dialEstablished, took: 250 * time.Millisecond}
		slow := dialOutcome{kind: dialEstablished, took: time.Second}
		neutral := dialOutcome{kind: dialNeutral}
		timedOut := dialOutcome{kind: dialTimedOut}

		push(100, false)
		if got := count(); got != startWindow {
			t.Fatalf("%d dials at once at the start, want %d", got, startWindow)
		}
		end(10, quick)
		if got, w := count(), window(); w != startWindow+10 || got != w {
			t.Fatalf("after 10 quick dials: window %d with %d running, want %d", w, got, startWindow+10)
		}
		end(5, between)
		end(5, neutral)
		if w := window(); w != startWindow+10 {
			t.Fatalf("dials in between and failed dials moved the window to %d", w)
		}
		for range 30 {
			end(1, quick)
		}
		if got, w := count(), window(); w != 40 || got != 40 {
			t.Fatalf("window %d with %d running, want max_concurrent_dials 40", w, got)
		}
		end(3, slow)
		if w := window(); w != 37 {
			t.Fatalf("after 3 slow dials: window %d, want 37", w)
		}
		end(1, timedOut)
		if w := window(); w != 18 {
			t.Fatalf("after a timeout: window %d, want 18", w)
		}
		// The dials beyond the window finish; no new one starts until
		// fewer than the window run.
		end(count()-18, neutral)
		if got := count(); got != 18 {
			t.Fatalf("%d running, want the window's 18", got)
		}
		end(5, slow)
		if w := window(); w != startWindow {
			t.Fatalf("after slow dials: window %d, want it back at %d, no lower", w, startWindow)
		}
		end(2, timedOut)
		if w := window(); w != startWindow {
			t.Fatalf("after timeouts: window %d, want %d, no lower", w, startWindow)
		}
		if q.maxWindow != 40 || q.maxRunning != 40 || q.shrinks != 1 {
			t.Errorf("maxWindow %d, maxRunning %d, shrinks %d; want 40, 40, 1", q.maxWindow, q.maxRunning, q.shrinks)
		}
		// Hosts already known to fail time out without shrinking it: their
		// dials come back as neutral (runDial), and hold half the window.
		for count() > 0 {
			end(count(), neutral)
		}
		push(20, true)
		if got := count(); got != startWindow/2 {
			t.Errorf("%d failing hosts dialing at once, want half the window, %d", got, startWindow/2)
		}
		for count() > 0 {
			end(count(), neutral)
		}
		q.close(func(*dialJob, error) {})
	})
}

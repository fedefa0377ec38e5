package kvm

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
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
		q := newDialQueue(4, func(j *dialJob) {
			release := make(chan struct{})
			mu.Lock()
			running[j.h.name] = release
			mu.Unlock()
			<-release
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

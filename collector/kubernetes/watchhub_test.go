package kubernetes

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// stopBound bounds how long a test waits for released watches to stop:
// far beyond what stopping takes on any machine (a cancel, then the
// informers' goroutines return), far below the test binary's timeout, so
// that a reference never released fails the test in seconds instead of
// hanging it.
const stopBound = 30 * time.Second

// newEndingWatchServer is newWatchServer whose watches end when the test
// does, whether or not the client stopped them: a test whose watches were
// never released fails instead of hanging in the server's Close.
func newEndingWatchServer(t *testing.T) *watchServer {
	t.Helper()
	ws := &watchServer{}
	end := make(chan struct{})
	ws.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		go func() {
			select {
			case <-end:
				cancel()
			case <-ctx.Done():
			}
		}()
		ws.serve(w, r.WithContext(ctx))
	}))
	t.Cleanup(ws.Close)
	t.Cleanup(func() { close(end) }) // first: cleanups run last-in first-out
	return ws
}

// closeQuietly is the cleanup of a watcher the test may have closed
// already: a failure was reported by the test itself.
func closeQuietly(w *watcher) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = w.Close(ctx)
}

// closeWithin closes w, failing the test if its watches do not stop within
// stopBound.
func closeWithin(t *testing.T, w *watcher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), stopBound)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// stoppedWithin waits for ws to stop, at most stopBound.
func stoppedWithin(t *testing.T, ws *watchSet, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), stopBound)
	defer cancel()
	if err := waitStopped(ctx, []*watchSet{ws}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestWatchHubReleasesEveryReference: each way a watcher lets go of a set
// of caches (a rotated credential in ensure, Close, an adopted reference
// of a watcher already checking) releases its reference, and the last
// release stops the set and empties the hub, within seconds. A reference
// never released fails here, not at the test binary's timeout.
func TestWatchHubReleasesEveryReference(t *testing.T) {
	srv := newEndingWatchServer(t)
	hub := newWatchHub()
	logger := slog.New(slog.DiscardHandler)
	a, b, c := &watcher{logger: logger, hub: hub}, &watcher{logger: logger, hub: hub}, &watcher{logger: logger, hub: hub}
	// Never left running past the test, whatever fails below.
	t.Cleanup(func() {
		for _, w := range []*watcher{a, b, c} {
			closeQuietly(w)
		}
	})
	first := a.ensure(srv.client())
	if b.ensure(srv.client()) != first || c.ensure(srv.client()) != first || hub.running() != 1 {
		t.Fatalf("three watchers of one cluster: %d sets, want 1 shared", hub.running())
	}

	// a's credential rotates: a moves to a set of its own; first runs on
	// for b and c.
	rotated := srv.client()
	rotated.watchCfg.BearerToken = "rotated"
	second := a.ensure(rotated)
	if second == first || hub.running() != 2 || first.stopped() {
		t.Fatalf("after a rotation: %d sets, the shared one stopped: %v", hub.running(), first.stopped())
	}

	// c checks, then adopts b's reference (a reload's successor that
	// already checked): it keeps its own and releases b's.
	c.adopt(b)
	closeWithin(t, b) // holds nothing any more
	if first.stopped() || hub.running() != 2 {
		t.Fatalf("first stopped (%v) or %d sets while c still reads it", first.stopped(), hub.running())
	}

	closeWithin(t, c)
	stoppedWithin(t, first, "the shared set after its last watcher closed")
	closeWithin(t, a)
	stoppedWithin(t, second, "the rotated set after its watcher closed")
	if n := hub.running(); n != 0 {
		t.Errorf("%d sets still in the hub after every watcher closed", n)
	}
}

// TestWatchRotationStopsTheOldSet: a watcher alone on a set that moves to
// another credential stops the old set at once, before any Close.
func TestWatchRotationStopsTheOldSet(t *testing.T) {
	srv := newEndingWatchServer(t)
	w := &watcher{logger: slog.New(slog.DiscardHandler)}
	t.Cleanup(func() { closeQuietly(w) })
	old := w.ensure(srv.client())
	rotated := srv.client()
	rotated.watchCfg.BearerToken = "rotated"
	if w.ensure(rotated) == old {
		t.Fatal("a rotated credential kept the old set")
	}
	stoppedWithin(t, old, "the old set after a rotation")
	if n := w.hub.running(); n != 1 {
		t.Errorf("%d sets in the hub, want the new one only", n)
	}
	closeWithin(t, w)
}

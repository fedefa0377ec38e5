package kubernetes

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// waitWithin polls cond until it holds, failing after d: a bound far
// beyond what the condition takes on any machine, so that a broken
// build fails the test instead of hanging it.
func waitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %s", what, d)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// goodNodes serves one node with room and no pods.
func goodNodes(t *testing.T, w wire) *hostileAPI {
	t.Helper()
	h := newHostileAPI(t, w)
	n := fitNode("n1", nil)
	n.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
	n.ResourceVersion = "5"
	h.items["nodes"] = [][]byte{w.item(t, n)}
	return h
}

// TestScheduleKeepsRefusals: a verdict that is not Ready (a can_i "no",
// an exhausted quota, a refused dry run) is the check's, never replaced
// by the fit; an admitted Pod that cannot be read is BadResponse.
func TestScheduleKeepsRefusals(t *testing.T) {
	h := goodNodes(t, wire{})
	c := &Checker{watch: &watcher{logger: slog.New(slog.DiscardHandler)}}
	t.Cleanup(func() { _ = c.watch.Close(context.Background()) })
	logger := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// The caches hold a node with room: a fit would say Ready.
	if v := c.schedule(ctx, logger, h.client(), fitPod(nil, "cpu", "1"), provider.Verdict{Reason: provider.ReasonReady}); v.Reason != provider.ReasonReady {
		t.Fatalf("the fit itself: %s %s", v.Reason, v.Message)
	}
	for _, reason := range []provider.Reason{provider.ReasonForbidden, ReasonQuotaExhausted, ReasonAdmissionDenied} {
		v := c.schedule(ctx, logger, h.client(), fitPod(nil, "cpu", "1"), provider.Verdict{Reason: reason, Message: "refused"})
		if v.Reason != reason || v.Message != "refused" {
			t.Errorf("%s became %s %q", reason, v.Reason, v.Message)
		}
	}
	v := c.schedule(ctx, logger, h.client(), nil, provider.Verdict{Reason: provider.ReasonReady, Facts: &Facts{needsErr: "protobuf"}})
	if v.Reason != provider.ReasonBadResponse || !strings.Contains(v.Message, "could not be read: protobuf") {
		t.Errorf("an admitted Pod that cannot be read: %s %q, want BadResponse", v.Reason, v.Message)
	}
}

// TestWatchServerErrorIsNoFit: after a good sync, an API server that
// answers 500 makes the caches stale: Unknown, naming the error, never a
// fit on them.
func TestWatchServerErrorIsNoFit(t *testing.T) {
	h := goodNodes(t, wire{})
	failing := make(chan struct{})
	h.after["nodes"] = func(http.ResponseWriter) { <-failing } // the watch ends when the server starts failing
	h.failing = failing
	ws := watchUntil(t, h)
	syncedWithin(t, ws)
	if reason, msg, ok := ws.verdict(time.Now()); !ok {
		t.Fatalf("synced: %s %s", reason, msg)
	}
	close(failing)
	var msg string
	waitWithin(t, time.Minute, "an Unknown verdict", func() bool {
		var reason provider.Reason
		var ok bool
		reason, msg, ok = ws.verdict(time.Now())
		return !ok && reason == provider.ReasonUnknown
	})
	if !strings.Contains(msg, "the watch of nodes has been failing") || !strings.Contains(msg, "etcdserver: request timed out") {
		t.Errorf("message %q does not say the watch of nodes fails and why", msg)
	}
}

// TestWatchFailingSince: the time a watch has been failing for counts
// from its first failure, not its last, and starts again after a success.
func TestWatchFailingSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &watched{what: "nodes"}
		start := time.Now()
		w.record(errors.New("first"))
		time.Sleep(10 * time.Second)
		w.record(errors.New("second"))
		w.record(context.Canceled) // the watch being stopped: no failure
		since, err := w.state()
		if !since.Equal(start) || err == nil || err.Error() != "second" {
			t.Errorf("after two failures: since %v (want %v), err %v (want the last)", since, start, err)
		}
		w.record(nil)
		if _, err := w.state(); err != nil {
			t.Errorf("a success left %v", err)
		}
		time.Sleep(time.Minute)
		again := time.Now()
		w.record(errors.New("third"))
		if since, _ := w.state(); !since.Equal(again) {
			t.Errorf("a failure after a success counts from %v, want %v", since, again)
		}
		ws := &watchSet{nodes: w, pods: &watched{what: "pods"}}
		time.Sleep(90 * time.Second)
		if _, msg, _ := ws.verdict(time.Now()); !strings.Contains(msg, "failing for 1m30s") {
			t.Errorf("verdict %q, want failing for 1m30s", msg)
		}
	})
}

// failingStatus is what an API server with a sick etcd answers.
func failingStatus(w http.ResponseWriter) {
	writeJSONStatus(w, http.StatusInternalServerError, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Reason: metav1.StatusReasonInternalError, Code: http.StatusInternalServerError, Message: "etcdserver: request timed out"})
}

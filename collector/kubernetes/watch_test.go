package kubernetes

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// watchServer answers the watches' list and watch calls as an API server
// does: a list of the objects, then a watch that stays open and quiet
// until the client goes away. forbid answers 403 to the Pods' calls.
type watchServer struct {
	*httptest.Server
	forbid bool
	// hold, when not nil, keeps the Pods' list waiting until closed.
	hold chan struct{}

	mu            sync.Mutex
	podSelectors  []string
	nodeListCalls int
}

func newWatchServer(t *testing.T, forbid bool, hold chan struct{}) *watchServer {
	t.Helper()
	ws := &watchServer{forbid: forbid, hold: hold}
	ws.Server = httptest.NewServer(http.HandlerFunc(ws.serve))
	t.Cleanup(ws.Close)
	return ws
}

func (s *watchServer) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	w.Header().Set("Content-Type", "application/json")
	pods := r.URL.Path == "/api/v1/pods"
	s.mu.Lock()
	if pods {
		s.podSelectors = append(s.podSelectors, q.Get("fieldSelector"))
	} else {
		s.nodeListCalls++
	}
	s.mu.Unlock()
	if pods && s.forbid {
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden,
			Message: `pods is forbidden: User "system:serviceaccount:monitoring:phe" cannot list resource "pods" in API group "" at the cluster scope`})
		return
	}
	if pods && s.hold != nil {
		select {
		case <-s.hold:
		case <-r.Context().Done():
			return
		}
	}
	var body any
	var items []runtime.Object
	if pods {
		p := boundPod("n1", "cpu", "1")
		p.Spec.Containers[0].Image = "registry.example/proxy:1"
		p.ResourceVersion = "7"
		p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
		items = []runtime.Object{p}
		body = &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.Pod{*p}}
	} else {
		n := fitNode("n1", nil)
		n.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example/big:1"}, SizeBytes: 1 << 30}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		n.ResourceVersion = "5"
		n2 := fitNode("n2", nil)
		n.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
		n2.TypeMeta = n.TypeMeta
		items = []runtime.Object{n, n2}
		body = &corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "10"},
			Items: []corev1.Node{*n, *n2}}
	}
	if q.Get("watch") == "true" {
		serveWatch(w, r, items)
		return
	}
	_ = json.NewEncoder(w).Encode(body)
}

func (s *watchServer) client() *client {
	return &client{host: s.URL, watchCfg: &rest.Config{Host: s.URL}}
}

// waitFor polls cond until it holds or the test's context ends: no
// assumption on how fast the machine is.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx := t.Context()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: never happened", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Not parallel: goleak.VerifyNone sees every goroutine of the process.
func TestWatchSyncsStripsAndStops(t *testing.T) {
	srv := newWatchServer(t, false, nil)
	w := &watcher{logger: slog.New(slog.DiscardHandler)}
	// Registered before anything can fail: a t.Fatal below stops the
	// watches instead of leaving them to hang the test binary.
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	cl := srv.client()
	ws := w.ensure(cl)
	if again := w.ensure(cl); again != ws {
		t.Fatal("a second check with the same client started new watches")
	}
	if !ws.waitSynced(t.Context()) {
		t.Fatal("caches never synced")
	}
	if reason, msg, ok := ws.verdict(time.Now()); !ok {
		t.Fatalf("synced caches not usable: %s %s", reason, msg)
	}
	nodes, pods := ws.snapshot()
	if len(nodes) != 2 || len(pods) != 1 {
		t.Fatalf("cached %d nodes and %d pods, want 2 and 1", len(nodes), len(pods))
	}
	for _, n := range nodes {
		if len(n.Status.Images) != 0 || len(n.Status.Conditions) != 0 || n.Labels["kubernetes.io/hostname"] != n.Name {
			t.Errorf("node %s not stripped to what the fit reads: %+v", n.Name, n.Status)
		}
	}
	if p := pods[0]; p.Spec.NodeName != "n1" || len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Image != "" {
		t.Errorf("pod not stripped to node and requests: %+v", p.Spec)
	}
	srv.mu.Lock()
	sels := slices.Clone(srv.podSelectors)
	srv.mu.Unlock()
	// Two Pod watches: the bound ones, and those a preemption nominated
	// to a node (nominated.go), each non-terminal.
	for _, want := range []string{"spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
		"spec.nodeName=,status.nominatedNodeName!=,status.phase!=Succeeded,status.phase!=Failed"} {
		if !slices.Contains(sels, want) {
			t.Errorf("pods watched with field selectors %q, want %q among them", sels, want)
		}
	}
	if nominated := ws.nominatedList(); len(nominated) != 0 {
		t.Errorf("a server whose Pods are all bound: %d nominated Pods kept, want none", len(nominated))
	}

	// Another client of the same server and credentials (a reread
	// kubeconfig): the same watches.
	if w.ensure(srv.client()) != ws {
		t.Fatal("a client with the same credentials started new watches")
	}
	// A rotated credential: new watches, the old ones stop.
	rotated := srv.client()
	rotated.watchCfg.BearerToken = "rotated"
	ws2 := w.ensure(rotated)
	if ws2 == ws {
		t.Fatal("a new credential kept the old watches")
	}
	waitFor(t, "the old watches to stop", ws.stopped)
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Close returns once every informer goroutine ended, those of the
	// replaced watches too.
	if !ws.stopped() || !ws2.stopped() {
		t.Error("Close returned before the watches stopped")
	}
	if w.ensure(cl) != nil {
		t.Error("a closed watcher started watches")
	}
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
}

func TestWatchForbiddenIsSaid(t *testing.T) {
	srv := newWatchServer(t, true, nil)
	w := &watcher{logger: slog.New(slog.DiscardHandler)}
	defer func() {
		if err := w.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	ws := w.ensure(srv.client())
	var reason provider.Reason
	var msg string
	waitFor(t, "a Forbidden verdict", func() bool {
		reason, msg, _ = ws.verdict(time.Now())
		return reason == provider.ReasonForbidden
	})
	for _, want := range []string{"cannot list/watch pods cluster-wide", "components/schedule", `cannot list resource "pods"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
}

func TestWatchNotSyncedIsNoFit(t *testing.T) {
	hold := make(chan struct{})
	srv := newWatchServer(t, false, hold)
	w := &watcher{logger: slog.New(slog.DiscardHandler)}
	defer func() {
		if err := w.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	ws := w.ensure(srv.client())
	// The Pods' list is held: however long one waits, no fit.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if ws.waitSynced(ctx) {
		t.Fatal("synced while the pods' list was held")
	}
	reason, msg, ok := ws.verdict(time.Now())
	if ok || reason != provider.ReasonUnknown || !strings.Contains(msg, "still filling") {
		t.Errorf("verdict while syncing = %v %s %q, want Unknown, still filling", ok, reason, msg)
	}
	close(hold)
	if !ws.waitSynced(t.Context()) {
		t.Fatal("never synced once released")
	}
}

// serveWatch answers a watch as the API server does. A watch-list
// (sendInitialEvents=true, client-go's default since 1.35) first gets
// items as ADDED events and the bookmark that ends them; then the watch
// stays open and quiet until the client goes away.
func serveWatch(w http.ResponseWriter, r *http.Request, items []runtime.Object) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if r.URL.Query().Get("sendInitialEvents") == "true" {
		enc := json.NewEncoder(w)
		var bookmark runtime.Object = &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}}
		if r.URL.Path == "/api/v1/nodes" {
			bookmark = &corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}}
		}
		for _, o := range items {
			_ = enc.Encode(map[string]any{"type": "ADDED", "object": o})
		}
		m, _ := meta.Accessor(bookmark)
		m.SetResourceVersion("10")
		m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		_ = enc.Encode(map[string]any{"type": "BOOKMARK", "object": bookmark})
	}
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// TestWatchHubShares: the watchers of one hub that reach the same API
// server with the same credentials read one set of caches; it runs until
// the last releases it, and a checker that replaces another on reload
// takes over its reference (Adopt) instead of starting anew.
// Not parallel: goleak.VerifyNone sees every goroutine of the process.
func TestWatchHubShares(t *testing.T) {
	srv := newWatchServer(t, false, nil)
	hub := newWatchHub()
	logger := slog.New(slog.DiscardHandler)
	ws := make([]*watcher, 8)
	for i := range ws {
		ws[i] = &watcher{logger: logger, hub: hub}
	}
	first := ws[0].ensure(srv.client())
	for _, w := range ws[1:] {
		if w.ensure(srv.client()) != first {
			t.Fatal("an entry on the same cluster started watches of its own")
		}
	}
	if hub.running() != 1 {
		t.Fatalf("%d sets of watches run for one cluster, want 1", hub.running())
	}
	// A reload rebuilds entry 0: its successor adopts its reference,
	// then the old checker is closed.
	next := &watcher{logger: logger, hub: hub}
	next.adopt(ws[0])
	if err := ws[0].Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if next.ensure(srv.client()) != first || first.stopped() {
		t.Fatal("the reload's successor did not keep the running caches")
	}
	ws[0] = next
	for _, w := range ws[:7] {
		if err := w.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if first.stopped() || hub.running() != 1 {
		t.Fatal("the caches stopped while an entry still reads them")
	}
	if err := ws[7].Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !first.stopped() || hub.running() != 0 {
		t.Fatal("the caches run on after the last entry was removed")
	}
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
}

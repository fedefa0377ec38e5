package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fieldsel "k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// nonTerminalPods is the field selector of kube-scheduler's own Pod
// informer: a Succeeded or Failed Pod holds nothing on its node.
var nonTerminalPods = fieldsel.AndSelectors(
	fieldsel.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fieldsel.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
).String()

// watcher is an entry's hold on the watch caches of Nodes and Pods that
// schedule reads, between scrapes: taken by the first check, moved to
// another set when the client configuration changes (a rotated token),
// released by Close when a reload removes the entry. The caches are the
// hub's, shared by the entries of one cluster and identity (watchhub.go).
type watcher struct {
	logger *slog.Logger
	hub    *watchHub
	mu     sync.Mutex
	cur    *watchSet // nil until the first check, and after Close
	key    string    // cur's key in hub
	// old are the sets released by ensure that stopped with it; Close
	// waits for them too.
	old    []*watchSet
	closed bool
}

// watchSet is one pair of informers, started with one client.
type watchSet struct {
	cl      *client
	started time.Time
	cancel  context.CancelFunc
	done    chan struct{} // closed when every informer goroutine ended
	nodes   *watched
	pods    *watched
	// nominated is the watch of the Pods a preemption nominated to a node
	// and that are not bound yet (nominated.go).
	nominated *watched
	// namespaces is the third watch, of namespaces' names and labels,
	// started only when a namespaceSelector term needs them: the first
	// such fit closes nsStart (namespaces.go).
	namespaces *watched
	nsStart    chan struct{}
	nsOnce     sync.Once
	// sched is kube-scheduler's cache of the cluster, fed by the nodes'
	// and pods' events (schedcache.go); regs its handlers' registrations.
	sched *clusterCache
	regs  []cache.ResourceEventHandlerRegistration
}

// watched is one informer and how its list and watch calls fared.
type watched struct {
	what     string // "nodes", "pods"
	informer cache.SharedIndexInformer
	mu       sync.Mutex
	err      error     // the last list or watch call's error; nil after one succeeded
	since    time.Time // when err began
}

// ensure returns the caches of cl's API server and identity, taking a
// reference to them in the hub (and releasing the one to another
// identity's) as needed; nil after Close.
func (w *watcher) ensure(cl *client) *watchSet {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	key := watchKey(cl)
	if w.cur != nil && w.key == key {
		return w.cur
	}
	if w.hub == nil {
		w.hub = newWatchHub()
	}
	if w.cur != nil {
		if ws := w.hub.release(w.key); ws != nil {
			w.old = append(w.old, ws)
		}
	}
	w.old = slices.DeleteFunc(w.old, func(ws *watchSet) bool { return ws.stopped() })
	w.cur, w.key = w.hub.acquire(key, w.logger, cl), key
	return w.cur
}

// adopt takes over the reference of old (the watcher of the checker this
// one replaces on reload): the caches keep running for this entry, and
// old no longer holds them.
func (w *watcher) adopt(old *watcher) {
	if old == nil || old == w || old.hub != w.hub {
		return
	}
	old.mu.Lock()
	cur, key := old.cur, old.key
	old.cur, old.key = nil, ""
	old.mu.Unlock()
	if cur == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.cur != nil {
		// Never after a check of its own; released all the same.
		if ws := w.hub.release(key); ws != nil {
			w.old = append(w.old, ws)
		}
		return
	}
	w.cur, w.key = cur, key
}

func (ws *watchSet) stopped() bool {
	select {
	case <-ws.done:
		return true
	default:
		return false
	}
}

// Close releases the watcher's caches, and waits, at most until ctx ends,
// for the goroutines of those that stopped with it to end.
func (w *watcher) Close(ctx context.Context) error {
	w.mu.Lock()
	sets := w.old
	if w.cur != nil {
		if ws := w.hub.release(w.key); ws != nil {
			sets = append(sets, ws)
		}
	}
	w.cur, w.old, w.closed = nil, nil, true
	w.mu.Unlock()
	return waitStopped(ctx, sets)
}

// startWatch starts the informers of Nodes and of bound, non-terminal Pods
// with cl's configuration. Each object is stripped by the informer's
// transform before it is stored (stripNode, keepPod).
func startWatch(logger *slog.Logger, cl *client) *watchSet {
	ctx, cancel := context.WithCancel(context.Background())
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(logger.Handler()))
	ws := &watchSet{cl: cl, started: time.Now(), cancel: cancel, done: make(chan struct{})}
	ws.nsStart = make(chan struct{})
	nodesRC, podsRC, nsRC, hc, err := watchClient(cl)
	if err != nil {
		// Never happens with a configuration the check's client was
		// built from; said as the watch's error all the same.
		ws.nodes, ws.pods = &watched{what: "nodes", err: err, since: ws.started}, &watched{what: "pods", err: err, since: ws.started}
		ws.nominated = &watched{what: "nominated pods", err: err, since: ws.started}
		ws.namespaces = &watched{what: "namespaces", err: err, since: ws.started}
		close(ws.done)
		return ws
	}
	ws.nodes = newWatched("nodes", &corev1.Node{}, nodesRC, "", func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			return stripNode(n), nil
		}
		return obj, nil // a tombstone: the store deletes by its key
	})
	ws.pods = newWatched("pods", &corev1.Pod{}, podsRC, boundPods, func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			return keepPod(p), nil
		}
		return obj, nil
	})
	ws.nominated = newWatched("pods", &corev1.Pod{}, podsRC, nominatedPods, func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			return keepNominated(p), nil
		}
		return obj, nil
	})
	ws.nominated.what = "nominated pods"
	ws.namespaces = newWatched("namespaces", &corev1.Namespace{}, nsRC, "", func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Namespace); ok {
			return keepNamespace(n), nil
		}
		return obj, nil
	})
	if ws.sched, ws.regs, err = newClusterCache(ctx, ws.nodes.informer, ws.pods.informer); err != nil {
		// Never happens with informers not yet started; said as the
		// watch's error all the same.
		ws.nodes.record(err)
	} else if reg, err := ws.sched.followNominated(ws.nominated.informer); err != nil {
		ws.nominated.record(err)
	} else {
		ws.regs = append(ws.regs, reg)
	}
	var wg sync.WaitGroup
	for _, w := range []*watched{ws.nodes, ws.pods, ws.nominated} {
		wg.Go(func() { w.informer.RunWithContext(ctx) })
	}
	wg.Go(func() {
		select {
		case <-ctx.Done():
			return
		case <-ws.nsStart:
		}
		ws.namespaces.informer.RunWithContext(ctx)
	})
	go func() {
		wg.Wait()
		// The list calls' idle connections end with the informers:
		// nothing outlives Close.
		utilnet.CloseIdleConnectionsFor(hc.Transport)
		close(ws.done)
	}()
	return ws
}

// watchClient is the core/v1 clients of the watches of nodes, of pods and
// of namespaces:
// the check's configuration (credentials, dialer) without the check's
// per-request bounds, which a watch that lasts for hours and a list of
// 20,000 Pods would break, and with protobuf, which the API server encodes
// and the exporter decodes at a fraction of JSON's cost. Each decodes its
// answers with the bounds of boundedCodecs (bounds_watch.go).
func watchClient(cl *client) (nodes, pods, namespaces rest.Interface, hc *http.Client, err error) {
	cfg := rest.CopyConfig(cl.watchCfg)
	cfg.RateLimiter = nil // client-go's default: a few requests a second, enough for relists
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	// HTTP/1.1: a stopped watch's connection is closed with it. Over
	// HTTP/2 the shared connection outlives its reset streams, idle only
	// some time after the informers ended, and so after Close.
	cfg.NextProtos = []string{"http/1.1"}
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.APIPath = "/api"
	// The headers of every answer are bounded as every other request's
	// are (docs/security.md: "What the exporter bounds"), the bodies only
	// by boundedCodecs. A dialer makes the transport the watches' own
	// (client-go shares those of configs without one), so that its limit
	// is set before any request; the check's configuration has one.
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	var boundErr error
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		boundErr = provider.BoundHeaders(rt)
		return watchHeaders{rt}
	})
	if hc, err = rest.HTTPClientFor(cfg); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("watch client: %w", err)
	}
	if boundErr != nil {
		return nil, nil, nil, nil, fmt.Errorf("watch client: %w", boundErr)
	}
	rc := func(kind string) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.NegotiatedSerializer = boundedCodecs{NegotiatedSerializer: scheme.Codecs.WithoutConversion(), kind: kind}
		r, err := rest.RESTClientForConfigAndClient(c, hc)
		if err != nil {
			return nil, fmt.Errorf("watch client: %w", err)
		}
		return r, nil
	}
	if nodes, err = rc("Node"); err != nil {
		return nil, nil, nil, nil, err
	}
	if pods, err = rc("Pod"); err != nil {
		return nil, nil, nil, nil, err
	}
	if namespaces, err = rc("Namespace"); err != nil {
		return nil, nil, nil, nil, err
	}
	return nodes, pods, namespaces, hc, nil
}

// watchHeaders makes an answer whose headers went over the bound a bad
// response, which the watches' verdict names (watchSet.verdict), instead
// of a failure of unknown cause.
type watchHeaders struct{ rt http.RoundTripper }

func (t watchHeaders) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		var headers *provider.HeaderTooLargeError
		if err := provider.HeaderLimit(err); errors.As(err, &headers) {
			return nil, &badResponseError{err: err}
		}
	}
	return resp, err
}

// WrappedRoundTripper lets client-go's utilnet close the idle connections
// of the transport below.
func (t watchHeaders) WrappedRoundTripper() http.RoundTripper { return t.rt }

// newWatched builds the informer of resource, whose list and watch calls
// record their outcome: an informer retries a refused list for ever, and
// only says so to its log.
func newWatched(resource string, example runtime.Object, rc rest.Interface, fieldSelector string, transform cache.TransformFunc) *watched {
	w := &watched{what: resource}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = fieldSelector
			var out runtime.Object = &corev1.NodeList{}
			switch resource {
			case "pods":
				out = &corev1.PodList{}
			case "namespaces":
				out = &corev1.NamespaceList{}
			}
			err := rc.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
			w.record(err)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = fieldSelector
			opts.Watch = true
			wi, err := rc.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
			w.record(err)
			if err != nil {
				return nil, err
			}
			return recordWatchErrors(wi, w), nil
		},
	}
	w.informer = cache.NewSharedIndexInformerWithOptions(lw, example, cache.SharedIndexInformerOptions{})
	// Before Run: SetTransform fails only on a started informer.
	_ = w.informer.SetTransform(transform)
	return w
}

func (w *watched) record(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil:
		w.err = nil
	case errors.Is(err, context.Canceled):
		// The watch being stopped.
	case w.err == nil:
		w.err, w.since = err, time.Now()
	default:
		w.err = err
	}
}

func (w *watched) state() (time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.since, w.err
}

// synced says whether both caches hold a full list and the scheduler's
// cache has seen it.
func (ws *watchSet) synced() bool {
	for _, w := range []*watched{ws.nodes, ws.pods, ws.nominated} {
		if w.informer == nil || !w.informer.HasSynced() {
			return false
		}
	}
	for _, r := range ws.regs {
		if !r.HasSynced() {
			return false
		}
	}
	return true
}

// waitSynced waits until both caches hold a full list, or ctx ends.
func (ws *watchSet) waitSynced(ctx context.Context) bool {
	for {
		if ws.synced() {
			return true
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// verdict says why the caches cannot be fitted on yet, or ok: a refused
// list or watch is Forbidden, naming what to grant; a failing one, or
// caches still filling, Unknown, never a fit on a stale or partial cache.
func (ws *watchSet) verdict(now time.Time) (reason provider.Reason, msg string, ok bool) {
	for _, w := range []*watched{ws.nodes, ws.pods, ws.nominated} {
		since, err := w.state()
		if err == nil {
			continue
		}
		if bad := (*badResponseError)(nil); errors.As(err, &bad) {
			return provider.ReasonBadResponse, fmt.Sprintf("the watch of %s got an answer it cannot use, so no capacity is judged from it: %s",
				w.what, boundedErr(err)), false
		}
		if apierrors.IsForbidden(err) {
			return provider.ReasonForbidden, fmt.Sprintf("cannot list/watch %s cluster-wide, which schedule needs (list and watch on nodes and pods: deploy/kubernetes/components/schedule, Helm value rbac.schedule): %s",
				w.what, boundedErr(err)), false
		}
		return provider.ReasonUnknown, fmt.Sprintf("the watch of %s has been failing for %s, so its cache may be stale: %s",
			w.what, now.Sub(since).Round(time.Second), boundedErr(err)), false
	}
	for _, w := range []*watched{ws.nodes, ws.pods, ws.nominated} {
		if !w.informer.HasSynced() {
			return provider.ReasonUnknown, fmt.Sprintf("the watch cache of %s is still filling (started %s ago): no fit is judged on a partial cache",
				w.what, now.Sub(ws.started).Round(time.Second)), false
		}
	}
	if !ws.synced() {
		return provider.ReasonUnknown, fmt.Sprintf("the scheduler's cache is still filling from the watches (started %s ago): no fit is judged on a partial cache",
			now.Sub(ws.started).Round(time.Second)), false
	}
	return "", "", true
}

// snapshot is the caches' objects (the stripped copies; never modified).
func (ws *watchSet) snapshot() ([]*corev1.Node, []*corev1.Pod) {
	nl := ws.nodes.informer.GetStore().List()
	pl := ws.pods.informer.GetStore().List()
	nodes := make([]*corev1.Node, 0, len(nl))
	for _, o := range nl {
		if n, ok := o.(*corev1.Node); ok {
			nodes = append(nodes, n)
		}
	}
	pods := make([]*corev1.Pod, 0, len(pl))
	for _, o := range pl {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	return nodes, pods
}

func boundedErr(err error) string { return provider.BoundString(err.Error()) }

// Package kubernetes checks whether a Kubernetes cluster can host proxies:
// one check is one cluster-wide, label-selected list of at most one Pod, the
// same verb and scope the egress-proxies operator needs.
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
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TargetName is the only target of a cluster: its API server.
const TargetName = "apiserver"

const userAgent = "provider_health_exporter"

var _ provider.Checker = (*Checker)(nil)

// Checker checks one configured cluster.
//
// The client configuration is read at check time, and read again only when
// a file it came from changes (the kubeconfig, and the token and
// certificate files it names) or the last read failed: the files' contents
// are the check's business (docs/configuration.md: "Configuration"), so a rotated or
// repaired kubeconfig is picked up without a reload, and a broken one gives
// CredentialsUnavailable instead of stopping the exporter. Every file is
// read through boundedfile, so none can block or exhaust the exporter.
type Checker struct {
	cfg    *Entry
	logger *slog.Logger
	// headroomSet are the parsed headroom keys (zero: none set).
	headroomSet headroomSettings
	// placement is the pod_template dry run (nil: none set).
	placement *placement
	// watch keeps the Node and Pod caches of schedule (nil: not set),
	// and lastFit is the last fit's outcome.
	watch   *watcher
	lastFit lastFit
	// dialer opens every connection to the API server (provider.WithDialer).
	dialer *net.Dialer
	// inCluster are the files of the in-cluster configuration.
	inCluster inClusterFiles

	// mu guards the client state below; only checks take it.
	mu    sync.Mutex
	state *clientState // nil until the first check
	// host is the API server of the last configuration read, for Targets
	// without a lock.
	host atomic.Pointer[string]

	// warned are the warnings given once (warnOnce).
	warnedMu sync.Mutex
	warned   map[string]bool
}

// New builds the checker of one configured cluster. It does no I/O: the
// configuration is read by the first check, under its deadline.
func New(cfg *Entry, logger *slog.Logger, opts ...provider.Option) (*Checker, error) {
	return newChecker(cfg, logger, newWatchHub(), opts...)
}

// newChecker is New with the hub whose watch caches the checker shares
// (Kind's, for the checkers of the exporter's table).
func newChecker(cfg *Entry, logger *slog.Logger, hub *watchHub, opts ...provider.Option) (*Checker, error) {
	if cfg == nil {
		return nil, errors.New("kubernetes: nil configuration")
	}
	hs, err := newHeadroomSettings(cfg)
	if err != nil {
		return nil, err
	}
	pl, err := newPlacement(cfg)
	if err != nil {
		return nil, err
	}
	c := &Checker{cfg: cfg, logger: logger,
		dialer:    provider.Apply(opts).Dialer(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}),
		inCluster: defaultInCluster, headroomSet: hs, placement: pl}
	if cfg.Schedule {
		if logger == nil {
			logger = slog.New(slog.DiscardHandler)
		}
		c.watch = &watcher{logger: logger, hub: hub}
	}
	return c, nil
}

// Targets returns the API server, with the host of the last configuration
// read (empty before the first check).
func (c *Checker) Targets() []provider.Target {
	addr := ""
	if h := c.host.Load(); h != nil {
		addr = *h
	}
	return []provider.Target{{Name: TargetName, Address: addr}}
}

// Check lists at most one managed Pod across all namespaces. Exactly one
// HTTP request is made: client-go's rate limiter and its retries (on 429/5xx
// with Retry-After, and on EOF for GETs) are off, because they would spend
// the scrape budget waiting and hide the answer the check exists to report.
func (c *Checker) Check(ctx context.Context, logger *slog.Logger, target string) provider.Verdict {
	if target != TargetName {
		return provider.Verdict{Reason: provider.ReasonUnknown, Message: fmt.Sprintf("unknown target %q", target)}
	}
	cl, err := c.current(ctx, logger)
	if err != nil {
		logger.Debug("client configuration unusable", "err", err)
		return provider.Verdict{Reason: provider.ReasonCredentialsUnavailable, Message: err.Error()}
	}
	v := c.list(ctx, logger, cl)
	listed := v.Reason == provider.ReasonReady
	if v.Reason == provider.ReasonReady && c.headroomSet.set() {
		// Only a cluster the exporter can list in is worth asking
		// whether a proxy would fit (docs/configuration.md: "Kubernetes").
		v = c.headroom(ctx, logger, cl, v)
	}
	if c.placement != nil {
		// Last, as the operator's create meets the cluster: after the
		// list and the headroom (docs/configuration.md: "Placement: pod_template").
		var admitted *corev1.Pod
		v, admitted = c.dryRun(ctx, logger, cl, v)
		if c.watch != nil {
			// What the scheduler would do with the Pod admission
			// returned (docs/configuration.md: "Scheduling: schedule").
			v = c.schedule(ctx, logger, cl, admitted, v)
		}
	}
	if f, ok := v.Facts.(*Facts); ok && listed {
		var note string
		v.Capacity, note = f.capacity(c.headroomSet.mins)
		if note != "" && v.Reason == provider.ReasonReady {
			v.Message += "; " + note
		}
		// A can_i "no", a quota or a dry run that refuses leaves no room,
		// whatever the quotas read say: 0, bound by that reason, even
		// where no quota bounds anything.
		// can_i alone names no need: no capacity.
		hasNeed := len(c.headroomSet.mins) > 0 || c.headroomSet.forPod
		if hasNeed && slices.Contains(refusals, v.Reason) && (!v.Capacity.Known || v.Capacity.Proxies > 0) {
			v.Capacity = provider.Capacity{Known: true, Binding: string(v.Reason)}
		}
	}
	v.Address = cl.host // the kubeconfig's server: target_info's address
	if v.Reason == provider.ReasonUnauthorized {
		// An exec plugin's credential without an expiry is reused until
		// the server refuses it, as kubectl does.
		c.forgetCredential()
	}
	return v
}

// refusals are the reasons a cluster that answered gives when one more
// proxy would not be admitted: its capacity is 0.
var refusals = []provider.Reason{provider.ReasonForbidden, ReasonQuotaExhausted, ReasonAdmissionDenied}

// list makes the check's one request with the client cl.
func (c *Checker) list(ctx context.Context, logger *slog.Logger, cl *client) provider.Verdict {
	// No socket outlives its scrape (docs/configuration.md: "Timeouts"): the next check dials afresh.
	defer utilnet.CloseIdleConnectionsFor(cl.http.Transport)

	tr := &trace{}
	ctx = context.WithValue(ctx, traceKey{}, tr)
	// client-go logs through the context's logger; send it to the check's
	// log so that /probe?debug=true shows it, instead of klog's global one.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(logger.Handler()))

	logger.Debug("listing pods", "host", cl.host, "label_selector", c.cfg.LabelSelector, "limit", 1)
	// The Pods' metadata only (decode.go): the same request, with an
	// Accept header that spares the answer the Pods' specs.
	res := cl.rest.Get().
		Resource("pods").
		VersionedParams(&metav1.ListOptions{LabelSelector: c.cfg.LabelSelector, Limit: 1}, scheme.ParameterCodec).
		SetHeader("Accept", partialListAccept).
		MaxRetries(0).
		Do(ctx)
	n, err := podCount(res)
	if err != nil {
		reason := classify(ctx, err, tr)
		logger.Debug("list failed", "reason", reason, "err", err)
		return provider.Verdict{Reason: reason, Message: err.Error()}
	}
	msg := "no managed pods"
	if n > 0 {
		msg = "managed pods present"
	}
	logger.Debug("list succeeded", "pods_in_first_page", n)
	return provider.Verdict{Reason: provider.ReasonReady, Message: "pods listed cluster-wide: " + msg}
}

// trace records how far one check's request got, so that a failure can be
// told apart by where it happened rather than by its text.
type trace struct {
	// sent is set once the request passed client-go's authentication
	// wrappers (token file, exec plugin) and was handed to the network.
	sent atomic.Bool
	// answered is set once response headers arrived.
	answered atomic.Bool
}

type traceKey struct{}

// tracingTransport sits directly above the HTTP transport.
type tracingTransport struct {
	base http.RoundTripper
}

func (t *tracingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tr, _ := req.Context().Value(traceKey{}).(*trace)
	if tr != nil {
		tr.sent.Store(true)
	}
	resp, err := t.base.RoundTrip(req)
	if tr != nil && resp != nil {
		tr.answered.Store(true)
	}
	return resp, err
}

// WrappedRoundTripper lets client-go's helpers (closing idle connections)
// reach the transport below.
func (t *tracingTransport) WrappedRoundTripper() http.RoundTripper { return t.base }

var _ utilnet.RoundTripperWrapper = (*tracingTransport)(nil)

// badResponseError marks a 2xx answer that is not what was asked for.
type badResponseError struct{ err error }

func (e *badResponseError) Error() string { return "undecodable answer: " + e.err.Error() }
func (e *badResponseError) Unwrap() error { return e.err }

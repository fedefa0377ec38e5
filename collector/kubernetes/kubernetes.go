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
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// TargetName is the only target of a cluster: its API server.
const TargetName = "apiserver"

const userAgent = "provider_health_exporter"

var _ collector.Checker = (*Checker)(nil)

// Checker checks one configured cluster.
//
// The client is built once, in New, and rebuilt only when the kubeconfig file
// changes or the last build failed: the file's contents are the check's
// business (README: "Configuration"), so a rotated or repaired kubeconfig is picked up without
// a reload, and a broken one gives CredentialsUnavailable instead of stopping
// the exporter.
type Checker struct {
	cfg    *config.Kubernetes
	logger *slog.Logger
	// dialer opens every connection to the API server (WithDialer).
	dialer *net.Dialer

	mu     sync.Mutex
	client *client // nil when the last build failed
	err    error   // why the last build failed
	stamp  fileStamp
}

// client is what one build of the configuration yields.
type client struct {
	host string
	rest *rest.RESTClient
	http *http.Client
}

// fileStamp identifies a version of the kubeconfig file without reading it.
type fileStamp struct {
	modTime time.Time
	size    int64
}

// Option adjusts a Checker.
type Option func(*Checker)

// WithDialer makes the checker open every connection to the API server with
// d instead of the default dialer; d's Resolver resolves the server's name.
// For private DNS, and for tests that must keep every packet on loopback.
// A nil d keeps the default.
func WithDialer(d *net.Dialer) Option {
	return func(c *Checker) {
		if d != nil {
			c.dialer = d
		}
	}
}

// New builds the checker of one configured cluster. It does no network I/O.
// A kubeconfig whose contents are unusable, or a missing in-cluster
// configuration, is not an error here: the check reports it.
func New(cfg *config.Kubernetes, logger *slog.Logger, opts ...Option) (*Checker, error) {
	if cfg == nil {
		return nil, errors.New("kubernetes: nil configuration")
	}
	c := &Checker{cfg: cfg, logger: logger, dialer: &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
	for _, o := range opts {
		o(c)
	}
	c.mu.Lock()
	c.reloadLocked(c.statKubeconfig())
	c.mu.Unlock()
	if c.err != nil {
		logger.Warn("kubernetes client configuration unusable; the check reports CredentialsUnavailable until it is fixed", "err", c.err)
	}
	return c, nil
}

// Targets returns the API server, with the host of the current client
// configuration (empty while it cannot be built).
func (c *Checker) Targets() []collector.Target {
	c.mu.Lock()
	defer c.mu.Unlock()
	addr := ""
	if c.client != nil {
		addr = c.client.host
	}
	return []collector.Target{{Name: TargetName, Address: addr}}
}

// Check lists at most one managed Pod across all namespaces. Exactly one
// HTTP request is made: client-go's rate limiter and its retries (on 429/5xx
// with Retry-After, and on EOF for GETs) are off, because they would spend
// the scrape budget waiting and hide the answer the check exists to report.
func (c *Checker) Check(ctx context.Context, logger *slog.Logger, target string) collector.Verdict {
	if target != TargetName {
		return collector.Verdict{Reason: collector.ReasonUnknown, Message: fmt.Sprintf("unknown target %q", target)}
	}
	cl, err := c.current()
	if err != nil {
		logger.Debug("client configuration unusable", "err", err)
		return collector.Verdict{Reason: collector.ReasonCredentialsUnavailable, Message: err.Error()}
	}
	v := c.list(ctx, logger, cl)
	v.Address = cl.host // the kubeconfig's server: target_info's address
	return v
}

// list makes the check's one request with the client cl.
func (c *Checker) list(ctx context.Context, logger *slog.Logger, cl *client) collector.Verdict {
	// No socket outlives its scrape (README: "Timeouts"): the next check dials afresh.
	defer utilnet.CloseIdleConnectionsFor(cl.http.Transport)

	tr := &trace{}
	ctx = context.WithValue(ctx, traceKey{}, tr)
	// client-go logs through the context's logger; send it to the check's
	// log so that /probe?debug=true shows it, instead of klog's global one.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(logger.Handler()))

	logger.Debug("listing pods", "host", cl.host, "label_selector", c.cfg.LabelSelector, "limit", 1)
	res := cl.rest.Get().
		Resource("pods").
		VersionedParams(&metav1.ListOptions{LabelSelector: c.cfg.LabelSelector, Limit: 1}, scheme.ParameterCodec).
		MaxRetries(0).
		Do(ctx)
	pods, err := podList(res)
	if err != nil {
		reason := classify(ctx, err, tr)
		logger.Debug("list failed", "reason", reason, "err", err)
		return collector.Verdict{Reason: reason, Message: err.Error()}
	}
	msg := "no managed pods"
	if len(pods.Items) > 0 {
		msg = "managed pods present"
	}
	logger.Debug("list succeeded", "pods_in_first_page", len(pods.Items))
	return collector.Verdict{Reason: collector.ReasonReady, Message: "pods listed cluster-wide: " + msg}
}

// podList returns the answer as a PodList. Result.Error is nil for any 2xx
// answer, and Result.Into accepts a well-formed object of another kind
// without an error, so the answer is decoded as whatever it says it is and
// then checked.
func podList(res rest.Result) (*corev1.PodList, error) {
	if err := res.Error(); err != nil {
		return nil, err
	}
	obj, err := res.Get()
	if err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			return nil, err
		}
		return nil, &badResponseError{err: err}
	}
	pods, ok := obj.(*corev1.PodList)
	if !ok {
		return nil, &badResponseError{err: fmt.Errorf("got %T, want a PodList", obj)}
	}
	return pods, nil
}

// current returns the client for the current kubeconfig, rebuilding it when
// the file changed or the last build failed (both cheap and local).
func (c *Checker) current() (*client, error) {
	stamp := c.statKubeconfig()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client == nil || stamp != c.stamp {
		c.reloadLocked(stamp)
	}
	return c.client, c.err
}

// statKubeconfig identifies the kubeconfig file's current version; the zero
// stamp stands for in-cluster configuration or a file that cannot be
// stat'ed (the build then reports why).
func (c *Checker) statKubeconfig() fileStamp {
	if c.cfg.Kubeconfig == "" {
		return fileStamp{}
	}
	st, err := os.Stat(c.cfg.Kubeconfig)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{modTime: st.ModTime(), size: st.Size()}
}

func (c *Checker) reloadLocked(stamp fileStamp) {
	c.stamp = stamp
	cl, err := c.build()
	if err != nil {
		c.client, c.err = nil, fmt.Errorf("kubernetes client configuration: %w", err)
		return
	}
	c.client, c.err = cl, nil
}

// build loads the configuration and constructs the client. It reads local
// files only.
func (c *Checker) build() (*client, error) {
	cfg, err := restConfig(c.cfg)
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	// The check is the only caller and makes one request per scrape: a
	// client-side limiter could only make it wait.
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	cfg.UserAgent = userAgent
	// Deprecation warnings would go to klog's global logger.
	cfg.WarningHandler = rest.NoWarnings{}
	cfg.Dial = c.dialer.DialContext
	// The innermost wrapper, below client-go's authentication wrappers, so
	// that reaching it means credentials were obtained.
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &tracingTransport{base: rt} })
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()

	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("http client: %w", err)
	}
	rc, err := rest.RESTClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("rest client: %w", err)
	}
	return &client{host: cfg.Host, rest: rc, http: httpClient}, nil
}

// restConfig reads the kubeconfig (only that file: neither $KUBECONFIG nor
// an in-cluster fallback may change which cluster is checked), or the
// in-cluster configuration when no kubeconfig is configured.
func restConfig(kc *config.Kubernetes) (*rest.Config, error) {
	if kc.Kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration: %w", err)
		}
		return cfg, nil
	}
	raw, err := clientcmd.LoadFromFile(kc.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	// Relative certificate and token paths are relative to the file.
	if err := clientcmd.ResolveLocalPaths(raw); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, kc.Context, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	return cfg, nil
}

// CheckFiles reads the kubeconfig the way a check does, without any request:
// what --config.check warns about. The in-cluster configuration is not
// looked at, since it exists only inside the cluster.
func CheckFiles(cfg *config.Kubernetes) error {
	if cfg.Kubeconfig == "" {
		return nil
	}
	_, err := restConfig(cfg)
	return err
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

// badResponseError marks a 2xx answer that is not a PodList.
type badResponseError struct{ err error }

func (e *badResponseError) Error() string { return "undecodable answer: " + e.err.Error() }
func (e *badResponseError) Unwrap() error { return e.err }

package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/egress-proxies/provider_health_exporter/internal/quantity"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// ReasonQuotaExhausted says a configured min_quota_headroom is not met by a
// ResourceQuota of the namespace (docs/metrics.md: "Reasons"). The API server
// answered, so up = 1. A can_i review that says no is Forbidden, the
// shared reason.
const ReasonQuotaExhausted provider.Reason = "QuotaExhausted"

// CanIAnswer is the API server's answer to one can_i review.
type CanIAnswer struct {
	CanI
	Allowed bool
	// Reason is the review's status.reason, and its evaluationError when
	// the authorizer had one; empty when the API gives neither.
	Reason string
}

// Quantity is a quantity of the API server's answer: the text it wrote
// (cut for messages) and its value, read with bounded work
// (internal/quantity), in thousandths of its unit, clamped.
type Quantity struct {
	Text  string
	Milli quantity.Milli
}

func (q Quantity) String() string { return q.Text }

// parseQuantity reads a quantity of the answer; one no cluster could mean
// ("1e1000000000") is an error, which makes the check BadResponse.
func parseQuantity(s string) (Quantity, error) {
	m, err := quantity.Parse(s)
	if err != nil {
		return Quantity{}, err //nolint:wrapcheck // its text names the quantity
	}
	return Quantity{Text: provider.BoundString(s), Milli: m}, nil
}

// QuotaUsage is one configured resource of one ResourceQuota: the series
// kubernetes_quota_hard and _used, and the status page's details.
type QuotaUsage struct {
	// Quota is the quota's name, cut (provider.BoundString) when it is
	// not a valid label value.
	Quota    string
	Resource corev1.ResourceName
	Hard     Quantity
	Used     Quantity
	// NoUsage is set when the quota's status has no usage of the resource
	// yet (no quota controller has counted it): it is not judged.
	NoUsage bool
	// NoSeries is set for a quota that is judged but not exported: its
	// name is no valid label value, or MaxQuotaSeries quotas already are.
	NoSeries bool
}

// ReviewConcurrency is how many can_i reviews of one check are in flight
// at once; the quota list runs beside them (docs/configuration.md:
// "Kubernetes").
const ReviewConcurrency = 8

// maxReviewBody is the body limit of an access review's answer: a few
// hundred bytes, a few KiB with a webhook's reason. A larger one is
// BadResponse, so that ReviewConcurrency reviews cannot hold 4 MiB each.
const maxReviewBody = 64 << 10

// MaxQuotaSeries is the most ResourceQuotas of the namespace whose series
// a check exports (the first by name); every quota is judged.
const MaxQuotaSeries = 32

// Headroom is what the headroom part of a check read.
type Headroom struct {
	CanI   []CanIAnswer
	Quotas []QuotaUsage
	// PodQuotas are every resource of every quota without scopes, for the
	// capacity of a pod_template (podQuotaUsages); not exported, not
	// judged. Nil without pod_template.
	PodQuotas []QuotaUsage
	// QuotaErr says why the quota list failed for an entry that lists
	// quotas only for its pod_template's capacity: the verdict is not the
	// list's, the capacity is unknown.
	QuotaErr string
}

// readHeadroom asks every can_i review, ReviewConcurrency at a time, and
// lists the namespace's ResourceQuotas (when mins is not empty) beside
// them, under ctx, each one request without retries like the list call. An error is that of the
// first request in can_i order, then the quota list, that failed, with its
// reason from classify, the list call's classifier.
func (c *Checker) readHeadroom(ctx context.Context, logger *slog.Logger, cl *client, namespace string,
	canI []CanI, mins map[corev1.ResourceName]Quantity, forPod bool,
) (Headroom, provider.Reason, error) {
	defer utilnet.CloseIdleConnectionsFor(cl.http.Transport)
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(logger.Handler()))
	h := Headroom{CanI: make([]CanIAnswer, len(canI))}
	errs := make([]error, len(canI)+1)
	traces := make([]*trace, len(canI)+1)
	var wg sync.WaitGroup
	// Each request in a goroutine of its own, which the engine's recover
	// does not reach: a panic in one is its error (provider.CatchPanic).
	slots := make(chan struct{}, ReviewConcurrency)
	for i, ci := range canI {
		traces[i] = &trace{}
		wg.Go(func() {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-ctx.Done():
				errs[i] = fmt.Errorf("can i %s: waiting for a review slot: %w", ci, context.Cause(ctx))
				return
			}
			errs[i] = provider.CatchPanic(func() (err error) {
				rctx := provider.WithBodyLimit(context.WithValue(ctx, traceKey{}, traces[i]), maxReviewBody)
				h.CanI[i], err = review(rctx, logger, cl, namespace, ci)
				return err
			})
		})
	}
	if len(mins) > 0 || forPod {
		traces[len(canI)] = &trace{}
		wg.Go(func() {
			errs[len(canI)] = provider.CatchPanic(func() (err error) {
				h.Quotas, h.PodQuotas, err = c.listQuotas(context.WithValue(ctx, traceKey{}, traces[len(canI)]), logger, cl, namespace, mins, forPod)
				return err
			})
		})
	}
	wg.Wait()
	if err := errs[len(canI)]; err != nil && len(mins) == 0 && !provider.Ended(ctx) {
		// Listed for the capacity alone: not the verdict's business.
		logger.Debug("resource quotas not listed: the capacity is unknown", "err", err)
		h.QuotaErr, errs[len(canI)] = provider.BoundString(err.Error()), nil
	}
	for i, err := range errs {
		if err != nil {
			return Headroom{}, classify(ctx, err, traces[i]), err
		}
	}
	return h, provider.ReasonReady, nil
}

// review makes one SelfSubjectAccessReview: may the checker's identity do
// ci in namespace? Every authenticated identity may ask about itself.
func review(ctx context.Context, logger *slog.Logger, cl *client, namespace string, ci CanI) (CanIAnswer, error) {
	body, err := json.Marshal(&authorizationv1.SelfSubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"},
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: ci.Verb, Group: ci.Group, Resource: ci.Resource,
		}},
	})
	if err != nil {
		return CanIAnswer{}, fmt.Errorf("can i %s: %w", ci, err)
	}
	logger.Debug("reviewing access", "namespace", namespace, "can_i", ci.String())
	res := cl.rest.Post().AbsPath("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews").
		SetHeader("Content-Type", "application/json").Body(body).MaxRetries(0).Do(ctx)
	obj, err := decoded[*authorizationv1.SelfSubjectAccessReview](res)
	if err != nil {
		return CanIAnswer{}, fmt.Errorf("can i %s in namespace %s: %w", ci, namespace, err)
	}
	// The authorizer's words, cut: they enter the verdict's message.
	a := CanIAnswer{CanI: ci, Allowed: obj.Status.Allowed, Reason: provider.BoundString(obj.Status.Reason)}
	if e := obj.Status.EvaluationError; e != "" {
		a.Reason = provider.BoundString(strings.TrimPrefix(a.Reason+"; "+provider.BoundString(e), "; "))
	}
	logger.Debug("access reviewed", "can_i", ci.String(), "allowed", a.Allowed, "reason", a.Reason)
	return a, nil
}

// listQuotas lists the namespace's ResourceQuotas and keeps, for each
// configured resource, every quota that limits it. A quantity no cluster
// could mean is BadResponse; a quota name that is no valid label value is
// judged under a cut name and its series are left out, with a log line.
//
// With forPod it also returns every resource of every quota without scopes,
// for the capacity of a pod_template, from the same list.
func (c *Checker) listQuotas(ctx context.Context, logger *slog.Logger, cl *client, namespace string, mins map[corev1.ResourceName]Quantity, forPod bool) (_, pod []QuotaUsage, _ error) {
	logger.Debug("listing resource quotas", "namespace", namespace)
	res := cl.rest.Get().Namespace(namespace).Resource("resourcequotas").MaxRetries(0).Do(ctx)
	list, err := quotaList(res)
	if err != nil {
		return nil, nil, fmt.Errorf("list resource quotas of namespace %s: %w", namespace, err)
	}
	if forPod {
		pod = podQuotaUsages(list, func(msg string, args ...any) { logger.Debug(msg, args...) })
	}
	slices.SortFunc(list, func(a, b rawQuota) int { return strings.Compare(a.Name, b.Name) })
	var out []QuotaUsage
	exported := 0
	for _, q := range list {
		noSeries := false
		name := q.Name
		if !provider.ValidLabelValue(name) {
			name, noSeries = provider.BoundString(name), true
			c.warnOnce(logger, "quota:"+name, "quota name is no valid label value (empty, over 256 bytes or not UTF-8): it is judged, its series are left out",
				"namespace", namespace, "quota", name)
		}
		counted := false
		for res := range mins {
			text, ok := q.SpecHard[string(res)]
			if !ok {
				continue
			}
			if h, ok := q.StatusHard[string(res)]; ok {
				text = h // what the quota system enforces
			}
			hard, err := parseQuantity(text)
			if err != nil {
				return nil, nil, &badResponseError{err: fmt.Errorf("quota %s in namespace %s: hard %s: %w", name, namespace, res, err)}
			}
			u := QuotaUsage{Quota: name, Resource: res, Hard: hard, NoSeries: noSeries}
			if usedText, ok := q.Used[string(res)]; ok {
				if u.Used, err = parseQuantity(usedText); err != nil {
					return nil, nil, &badResponseError{err: fmt.Errorf("quota %s in namespace %s: used %s: %w", name, namespace, res, err)}
				}
			} else {
				u.NoUsage = true
			}
			if !u.NoSeries && !counted {
				counted = true
				exported++
			}
			if exported > MaxQuotaSeries && !u.NoSeries {
				u.NoSeries = true
				c.warnOnce(logger, "quota-series", fmt.Sprintf("more than %d resource quotas limit the configured resources: only the first %d by name are exported as series; every one is judged", MaxQuotaSeries, MaxQuotaSeries),
					"namespace", namespace)
			}
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b QuotaUsage) int {
		return strings.Compare(a.Quota+"\x00"+string(a.Resource), b.Quota+"\x00"+string(b.Resource))
	})
	return out, pod, nil
}

// maxWarned bounds the warnings a checker remembers having given.
const maxWarned = 256

// warnOnce logs a warning the first time key comes up in the checker's
// life (a broken quota name would otherwise be logged at every scrape),
// and at debug level, for the check's log, every time.
func (c *Checker) warnOnce(logger *slog.Logger, key, msg string, args ...any) {
	c.warnedMu.Lock()
	first := !c.warned[key] && len(c.warned) < maxWarned
	if first {
		if c.warned == nil {
			c.warned = map[string]bool{}
		}
		c.warned[key] = true
	}
	c.warnedMu.Unlock()
	if first {
		logger.Warn(msg, args...)
		return
	}
	logger.Debug(msg, args...)
}

// decoded returns an answer as the type the request asks for. Result.Error
// is nil for any 2xx answer, and Result.Get accepts a well-formed object of
// another kind, so the answer is decoded as whatever it says it is, then
// checked (as podList does for the list call).
func decoded[T runtime.Object](res rest.Result) (T, error) {
	var zero T
	if err := res.Error(); err != nil {
		return zero, err
	}
	obj, err := res.Get()
	if err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			return zero, err
		}
		return zero, &badResponseError{err: err}
	}
	t, ok := obj.(T)
	if !ok {
		return zero, &badResponseError{err: fmt.Errorf("got %T, want %T", obj, zero)}
	}
	return t, nil
}

// evaluateHeadroom gives the verdict of what readHeadroom read, once the
// list call has passed: a can_i "no" is Forbidden, and wins over a quota
// short of its minimum, QuotaExhausted; otherwise Ready. The message names
// every failing entry; for Ready it names the quotas not judged ("" when
// there are none).
func evaluateHeadroom(namespace string, h Headroom, mins map[corev1.ResourceName]Quantity) (provider.Reason, string) {
	var denied []string
	for _, a := range h.CanI {
		if a.Allowed {
			continue
		}
		msg := fmt.Sprintf("cannot %s %s in namespace %s", a.Verb, a.ResourceWord(), namespace)
		if a.Reason != "" {
			msg += ": " + a.Reason
		}
		denied = append(denied, msg)
	}
	if len(denied) > 0 {
		return provider.ReasonForbidden, strings.Join(denied, "; ")
	}
	var short, unknown []string
	for _, u := range h.Quotas {
		if u.NoUsage {
			unknown = append(unknown, fmt.Sprintf("quota %s in namespace %s has no usage of %s yet", u.Quota, namespace, u.Resource))
			continue
		}
		// Bounded arithmetic: clamped thousandths (internal/quantity).
		left := u.Hard.Milli.Sub(u.Used.Milli)
		want := mins[u.Resource]
		if left < want.Milli {
			left = max(left, 0)
			short = append(short, fmt.Sprintf("quota %s in namespace %s: %s used %s of hard %s leaves %s, %s required",
				u.Quota, namespace, u.Resource, u.Used, u.Hard, quantity.Format(left, quantity.Binary(u.Hard.Text)), want))
		}
	}
	if len(short) > 0 {
		return ReasonQuotaExhausted, strings.Join(short, "; ")
	}
	return provider.ReasonReady, strings.Join(unknown, "; ")
}

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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// ReasonQuotaExhausted says a configured min_quota_headroom is not met by a
// ResourceQuota of the namespace (docs/metrics.md: "Reasons"). The API server
// answered, so up = 1. A can_i review that says no is Forbidden, the
// shared reason.
const ReasonQuotaExhausted collector.Reason = "QuotaExhausted"

// CanI is one can_i entry (config.CanI, which parses it).
type CanI = config.CanI

// ParseCanI reads a can_i entry; the configuration loader is where it is
// used.
func ParseCanI(s string) (CanI, error) { return config.ParseCanI(s) }

// ParseQuotaMinimum reads one min_quota_headroom entry; the configuration
// loader is where it is used.
func ParseQuotaMinimum(name, value string) (resource.Quantity, error) {
	return config.ParseQuotaMinimum(name, value)
}

// CanIAnswer is the API server's answer to one can_i review.
type CanIAnswer struct {
	CanI
	Allowed bool
	// Reason is the review's status.reason, and its evaluationError when
	// the authorizer had one; empty when the API gives neither.
	Reason string
}

// QuotaUsage is one configured resource of one ResourceQuota: the series
// kubernetes_quota_hard and _used, and the status page's details.
type QuotaUsage struct {
	Quota    string
	Resource corev1.ResourceName
	Hard     resource.Quantity
	Used     resource.Quantity
	// NoUsage is set when the quota's status has no usage of the resource
	// yet (no quota controller has counted it): it is not judged.
	NoUsage bool
}

// Headroom is what the headroom part of a check read.
type Headroom struct {
	CanI   []CanIAnswer
	Quotas []QuotaUsage
}

// readHeadroom asks every can_i review and lists the namespace's
// ResourceQuotas (when mins is not empty), all at once under ctx, each one
// request without retries like the list call. An error is that of the
// first request in can_i order, then the quota list, that failed, with its
// reason from classify, the list call's classifier.
func (c *Checker) readHeadroom(ctx context.Context, logger *slog.Logger, cl *client, namespace string,
	canI []CanI, mins map[corev1.ResourceName]resource.Quantity,
) (Headroom, collector.Reason, error) {
	defer utilnet.CloseIdleConnectionsFor(cl.http.Transport)
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(logger.Handler()))
	h := Headroom{CanI: make([]CanIAnswer, len(canI))}
	errs := make([]error, len(canI)+1)
	traces := make([]*trace, len(canI)+1)
	var wg sync.WaitGroup
	for i, ci := range canI {
		traces[i] = &trace{}
		wg.Go(func() {
			h.CanI[i], errs[i] = review(context.WithValue(ctx, traceKey{}, traces[i]), logger, cl, namespace, ci)
		})
	}
	if len(mins) > 0 {
		traces[len(canI)] = &trace{}
		wg.Go(func() {
			h.Quotas, errs[len(canI)] = listQuotas(context.WithValue(ctx, traceKey{}, traces[len(canI)]), logger, cl, namespace, mins)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return Headroom{}, classify(ctx, err, traces[i]), err
		}
	}
	return h, collector.ReasonReady, nil
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
	a := CanIAnswer{CanI: ci, Allowed: obj.Status.Allowed, Reason: obj.Status.Reason}
	if e := obj.Status.EvaluationError; e != "" {
		a.Reason = strings.TrimPrefix(a.Reason+"; "+e, "; ")
	}
	logger.Debug("access reviewed", "can_i", ci.String(), "allowed", a.Allowed, "reason", a.Reason)
	return a, nil
}

// listQuotas lists the namespace's ResourceQuotas and keeps, for each
// configured resource, every quota that limits it.
func listQuotas(ctx context.Context, logger *slog.Logger, cl *client, namespace string, mins map[corev1.ResourceName]resource.Quantity) ([]QuotaUsage, error) {
	logger.Debug("listing resource quotas", "namespace", namespace)
	res := cl.rest.Get().Namespace(namespace).Resource("resourcequotas").MaxRetries(0).Do(ctx)
	list, err := decoded[*corev1.ResourceQuotaList](res)
	if err != nil {
		return nil, fmt.Errorf("list resource quotas of namespace %s: %w", namespace, err)
	}
	var out []QuotaUsage
	for _, q := range list.Items {
		for name := range mins {
			hard, ok := q.Spec.Hard[name]
			if !ok {
				continue
			}
			if h, ok := q.Status.Hard[name]; ok {
				hard = h // what the quota system enforces
			}
			used, ok := q.Status.Used[name]
			out = append(out, QuotaUsage{Quota: q.Name, Resource: name, Hard: hard, Used: used, NoUsage: !ok})
		}
	}
	slices.SortFunc(out, func(a, b QuotaUsage) int {
		return strings.Compare(a.Quota+"\x00"+string(a.Resource), b.Quota+"\x00"+string(b.Resource))
	})
	return out, nil
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
func evaluateHeadroom(namespace string, h Headroom, mins map[corev1.ResourceName]resource.Quantity) (collector.Reason, string) {
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
		return collector.ReasonForbidden, strings.Join(denied, "; ")
	}
	var short, unknown []string
	for _, u := range h.Quotas {
		if u.NoUsage {
			unknown = append(unknown, fmt.Sprintf("quota %s in namespace %s has no usage of %s yet", u.Quota, namespace, u.Resource))
			continue
		}
		left := u.Hard.DeepCopy()
		left.Sub(u.Used)
		want := mins[u.Resource]
		if left.Cmp(want) < 0 {
			if left.Sign() < 0 {
				left = resource.Quantity{Format: left.Format}
			}
			short = append(short, fmt.Sprintf("quota %s in namespace %s: %s used %s of hard %s leaves %s, %s required",
				u.Quota, namespace, u.Resource, u.Used.String(), u.Hard.String(), left.String(), want.String()))
		}
	}
	if len(short) > 0 {
		return ReasonQuotaExhausted, strings.Join(short, "; ")
	}
	return collector.ReasonReady, strings.Join(unknown, "; ")
}

package kubernetes

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/egress-proxies/provider_health_exporter/collector"
)

// Reasons is the closed reason set of a Kubernetes cluster (docs/metrics.md:
// "Reasons"): the HTTP API's, QuotaExhausted for min_quota_headroom and
// AdmissionDenied for pod_template.
func Reasons() collector.ReasonSet {
	return collector.AuthenticatedHTTPReasons(collector.ReasonDef{Reason: ReasonQuotaExhausted, Up: true},
		collector.ReasonDef{Reason: ReasonAdmissionDenied, Up: true},
		collector.ReasonDef{Reason: ReasonUnschedulable, Up: true})
}

// Name is the kind's name: its configuration section and provider label.
const Name = "kubernetes"

// classify maps the error of one list request to a reason of docs/metrics.md's "Reasons". It
// goes by error type and by how far the request got (tr), never by text.
func classify(ctx context.Context, err error, tr *trace) collector.Reason {
	// When the budget is spent the error only says how the wait was cut.
	if collector.Ended(ctx) {
		return collector.ReasonTimeout
	}
	if r, ok := statusReason(err); ok {
		return r
	}
	var bad *badResponseError
	if errors.As(err, &bad) {
		return collector.ReasonBadResponse
	}
	if !tr.sent.Load() {
		// Nothing went on the wire: client-go's authentication wrappers
		// failed (exec plugin, token file).
		return collector.ReasonCredentialsUnavailable
	}
	if r, ok := collector.Transport.Classify(ctx, err); ok {
		if r == collector.ReasonUnreachable && tr.answered.Load() {
			// Headers arrived but the body could not be read.
			return collector.ReasonBadResponse
		}
		return r
	}
	// The HTTP/2 transport reports a lost connection with an untyped error;
	// apimachinery's matcher is the one client-go's own retry logic uses.
	if utilnet.IsHTTP2ConnectionLost(err) && !tr.answered.Load() {
		return collector.ReasonUnreachable
	}
	if tr.answered.Load() {
		return collector.ReasonBadResponse
	}
	return collector.ReasonUnknown
}

// statusReason classifies an answer of the API server: a Status body, or a
// status code client-go turned into a StatusError.
func statusReason(err error) (collector.Reason, bool) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return "", false
	}
	switch {
	case apierrors.IsUnauthorized(err):
		return collector.ReasonUnauthorized, true
	case apierrors.IsForbidden(err):
		return collector.ReasonForbidden, true
	case apierrors.IsNotFound(err):
		return collector.ReasonNotFound, true
	case apierrors.IsBadRequest(err), apierrors.IsInvalid(err):
		return collector.ReasonInvalidRequest, true
	case apierrors.IsTooManyRequests(err):
		return collector.ReasonRateLimited, true
	}
	if code := status.Status().Code; code >= 500 && code <= 599 {
		return collector.ReasonServerError, true
	}
	return collector.ReasonUnknown, true
}

package kubernetes

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Reasons is the closed reason set of a Kubernetes cluster (docs/metrics.md:
// "Reasons"): the HTTP API's, QuotaExhausted for min_quota_headroom and
// AdmissionDenied for pod_template.
func Reasons() provider.ReasonSet {
	return provider.AuthenticatedHTTPReasons(provider.ReasonDef{Reason: ReasonQuotaExhausted, Up: true},
		provider.ReasonDef{Reason: ReasonAdmissionDenied, Up: true},
		provider.ReasonDef{Reason: ReasonUnschedulable, Up: true})
}

// Name is the kind's name: its configuration section and provider label.
const Name = "kubernetes"

// classify maps the error of one list request to a reason of docs/metrics.md's "Reasons". It
// goes by error type and by how far the request got (tr), never by text.
func classify(ctx context.Context, err error, tr *trace) provider.Reason {
	// When the budget is spent the error only says how the wait was cut.
	if provider.Ended(ctx) {
		return provider.ReasonTimeout
	}
	if r, ok := statusReason(err); ok {
		return r
	}
	var bad *badResponseError
	if errors.As(err, &bad) {
		return provider.ReasonBadResponse
	}
	if !tr.sent.Load() {
		// Nothing went on the wire: client-go's authentication wrappers
		// failed (exec plugin, token file).
		return provider.ReasonCredentialsUnavailable
	}
	if r, ok := provider.TransportErrors.Classify(ctx, err); ok {
		if r == provider.ReasonUnreachable && tr.answered.Load() {
			// Headers arrived but the body could not be read.
			return provider.ReasonBadResponse
		}
		return r
	}
	// The HTTP/2 transport reports a lost connection with an untyped error;
	// apimachinery's matcher is the one client-go's own retry logic uses.
	if utilnet.IsHTTP2ConnectionLost(err) && !tr.answered.Load() {
		return provider.ReasonUnreachable
	}
	if tr.answered.Load() {
		return provider.ReasonBadResponse
	}
	return provider.ReasonUnknown
}

// statusReason classifies an answer of the API server: a Status body, or a
// status code client-go turned into a StatusError.
func statusReason(err error) (provider.Reason, bool) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return "", false
	}
	switch {
	case apierrors.IsUnauthorized(err):
		return provider.ReasonUnauthorized, true
	case apierrors.IsForbidden(err):
		return provider.ReasonForbidden, true
	case apierrors.IsNotFound(err):
		return provider.ReasonNotFound, true
	case apierrors.IsBadRequest(err), apierrors.IsInvalid(err):
		return provider.ReasonInvalidRequest, true
	case apierrors.IsTooManyRequests(err):
		return provider.ReasonRateLimited, true
	}
	if code := status.Status().Code; code >= 500 && code <= 599 {
		return provider.ReasonServerError, true
	}
	return provider.ReasonUnknown, true
}

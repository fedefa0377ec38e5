package kubernetes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/egress-proxies/provider_health_exporter/collector"
)

// Reasons is the closed reason set of a Kubernetes cluster (README:
// "Reasons"): the HTTP API's.
func Reasons() []collector.Reason { return collector.HTTPReasons() }

// classify maps the error of one list request to a reason of the README's "Reasons". It
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
	var urlErr *url.Error
	if !errors.As(err, &urlErr) {
		if tr.answered.Load() {
			// Headers arrived but the body could not be read.
			return collector.ReasonBadResponse
		}
		return collector.ReasonUnknown
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return collector.ReasonDNSFailed
	}
	if isTLS(err) {
		return collector.ReasonTLSError
	}
	// The TLS handshake timeout of net/http and the dialer's own timeout are
	// not context errors but still mean the deadline of a step was reached.
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return collector.ReasonTimeout
	}
	if isUnreachable(err) {
		return collector.ReasonUnreachable
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

func isTLS(err error) bool {
	if errors.Is(err, http.ErrSchemeMismatch) {
		return true
	}
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		verification     *tls.CertificateVerificationError
		recordHeader     tls.RecordHeaderError
		alert            tls.AlertError
	)
	if errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verification) || errors.As(err, &recordHeader) || errors.As(err, &alert) {
		return true
	}
	// An alert the server sent (it rejected our certificate, no common
	// cipher) comes as an OpError whose Op names it.
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "remote error"
}

// isUnreachable reports a connection that failed or dropped before any
// answer: refused, reset, no route, or closed before the response headers.
func isUnreachable(err error) bool {
	for _, errno := range []syscall.Errno{
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EPIPE,
	} {
		if errors.Is(err, errno) {
			return true
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	// The HTTP/2 transport reports a lost connection with an untyped error;
	// apimachinery's matcher is the one client-go's own retry logic uses.
	if utilnet.IsHTTP2ConnectionLost(err) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

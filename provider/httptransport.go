package provider

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
)

// MaxBodyBytes is the most the exporter reads of one response body from a
// provider's HTTP API or a token endpoint (docs/security.md: "What the exporter bounds"). A check needs
// a few KB (one page of one item); the largest object a limit=1 list can
// hold is a Pod near etcd's 1.5 MiB request limit, with its envelope.
const MaxBodyBytes = 4 << 20

// BodyTooLargeError ends the read of a response body over MaxBodyBytes.
type BodyTooLargeError struct{ Limit int64 }

func (e *BodyTooLargeError) Error() string {
	limit := fmt.Sprintf("%d MiB", e.Limit>>20)
	if e.Limit%(1<<20) != 0 {
		limit = fmt.Sprintf("%d KiB", e.Limit>>10)
	}
	return fmt.Sprintf("the response body is larger than the exporter's limit of %s; the read was stopped", limit)
}

type bodyLimitKey struct{}

// WithBodyLimit lowers the body limit of the requests made with ctx below
// MaxBodyBytes, for answers that are small by nature (an access review):
// read whole and decoded a few at a time, 4 MiB each would multiply.
func WithBodyLimit(ctx context.Context, limit int64) context.Context {
	return context.WithValue(ctx, bodyLimitKey{}, limit)
}

// bodyLimit is the body limit of req: MaxBodyBytes unless its context
// lowered it.
func bodyLimit(req *http.Request) int64 {
	if l, ok := req.Context().Value(bodyLimitKey{}).(int64); ok && l > 0 && l < MaxBodyBytes {
		return l
	}
	return MaxBodyBytes
}

// MaxHeaderBytes is the most the exporter reads of one response's headers
// from a provider's HTTP API or a token endpoint (docs/security.md: "What
// the exporter bounds"): net/http's own default is 10 MB per answer, which
// a server could send on every request of a check. An API server's or
// Compute's headers are a few KB, warnings included (kube-apiserver caps
// its Warning headers at 4 KiB in all).
const MaxHeaderBytes = 64 << 10

// HeaderTooLargeError is an answer whose headers are over MaxHeaderBytes:
// net/http stopped reading them. Over HTTP/2 the client ends the whole
// connection with a PROTOCOL_ERROR instead when headers go past the limit
// by more than a frame, which is how 9 MB of headers end; that error does
// not say why, so its message says what it most likely was.
type HeaderTooLargeError struct {
	Limit int64
	Err   error // net/http's own error
	// http2 is set for HTTP/2's PROTOCOL_ERROR.
	http2 bool
}

func (e *HeaderTooLargeError) Error() string {
	if e.http2 {
		return fmt.Sprintf("the server broke the HTTP/2 protocol, as headers over the exporter's limit of %d KiB do; the connection was closed: %v", e.Limit>>10, e.Err)
	}
	return fmt.Sprintf("the response headers are larger than the exporter's limit of %d KiB; the answer was refused: %v", e.Limit>>10, e.Err)
}

func (e *HeaderTooLargeError) Unwrap() error { return e.Err }

// BoundHeaders sets the response header limit of the *http.Transport at
// the bottom of rt (through WrappedRoundTripper) to MaxHeaderBytes, for
// HTTP/1 and HTTP/2 alike (the HTTP/2 transport takes its header list
// limit from it). BoundedTransport does this itself, so a kind need not
// call it; it is for a caller that wants to know: without an
// *http.Transport below, it returns an error. It must be called before rt
// sends its first request, on a transport of the caller's own.
func BoundHeaders(rt http.RoundTripper) error {
	t, err := transportBelow(rt)
	if err != nil {
		return err
	}
	boundTransport(t)
	return nil
}

// transportBelow is the *http.Transport at the bottom of rt, through
// WrappedRoundTripper; never the process's http.DefaultTransport.
func transportBelow(rt http.RoundTripper) (*http.Transport, error) {
	for rt != nil {
		if t, ok := rt.(*http.Transport); ok {
			if t == http.DefaultTransport {
				return nil, errors.New("refusing to change the process's http.DefaultTransport")
			}
			return t, nil
		}
		w, ok := rt.(interface{ WrappedRoundTripper() http.RoundTripper })
		if !ok {
			break
		}
		rt = w.WrappedRoundTripper()
	}
	return nil, fmt.Errorf("no *http.Transport below %T to bound response headers on", rt)
}

// boundTransport lowers t's response header limit to MaxHeaderBytes. It
// writes only when the limit is unset or higher, so that bounding a
// transport already bounded, which may be sending, is a read only (GCP
// builds two clients on one transport).
func boundTransport(t *http.Transport) {
	if t.MaxResponseHeaderBytes <= 0 || t.MaxResponseHeaderBytes > MaxHeaderBytes {
		t.MaxResponseHeaderBytes = MaxHeaderBytes
	}
}

// headerBytes is the size of h as an HTTP/1 answer carries it ("Key:
// value\r\n" per value), the measure MaxHeaderBytes is in.
func headerBytes(h http.Header) int64 {
	var n int64
	for k, vs := range h {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4)
		}
	}
	return n
}

// headerLimitErrors are how net/http reports headers over the limit: its
// HTTP/1 client, and the HTTP/2 one (net/http's bundled copy and
// golang.org/x/net/http2, which client-go uses, word it alike). http2Protocol
// is the connection error both HTTP/2 clients end a connection with when
// the headers go on past the limit. None of these errors has a type of
// its own in net/http; TestHeaderBound and the Kubernetes and GCP header
// tests pin the words against both transports.
var headerLimitErrors = []string{
	"server response headers exceeded ",
	"http2: response header list larger than advertised limit",
}

const http2Protocol = "connection error: PROTOCOL_ERROR"

// HeaderLimit is err as a *HeaderTooLargeError when it is how net/http
// says an answer's headers went over the limit BoundHeaders set, and err
// otherwise: for a client whose transport is bounded by BoundHeaders
// alone, below no BoundedTransport (Kubernetes' schedule watches, whose
// streams no body bound may end).
func HeaderLimit(err error) error { return headerLimit(err) }

// headerLimit wraps err when it is one of the errors above.
func headerLimit(err error) error {
	s := err.Error()
	for _, e := range headerLimitErrors {
		if strings.Contains(s, e) {
			return &HeaderTooLargeError{Limit: MaxHeaderBytes, Err: err}
		}
	}
	if strings.Contains(s, http2Protocol) {
		return &HeaderTooLargeError{Limit: MaxHeaderBytes, Err: err, http2: true}
	}
	return err
}

// RedirectError is a 3xx answer, which a provider's HTTP client never
// follows: credentials go only to the configured host and port.
type RedirectError struct {
	Status   string
	Location string
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("the server answered %s with Location %q; redirects are not followed, so that credentials only go to the configured server", e.Status, e.Location)
}

// BoundedTransport is the transport every provider HTTP client sends its
// requests through, below its authentication: a body is read up to
// MaxBodyBytes and no further, headers over MaxHeaderBytes are a
// *HeaderTooLargeError, and every 3xx answer but 304 is an error
// (*RedirectError) instead of a response, so that no client, whatever its
// redirect policy, asks another server, let alone with the credentials its
// authentication layer adds to every request, and no target is Ready on
// the word of a server nobody configured: a kind's status mapping never
// sees a redirect. 304 passes, as it is no redirect but the answer to a
// conditional request. All three classify as BadResponse (TransportErrors;
// docs/development.md: "Adding a provider").
//
// The header bound is its own, so that no kind can forget it: it sets
// MaxHeaderBytes on the *http.Transport below next (as BoundHeaders does;
// it must then be called before next sends), so that net/http stops
// reading at the limit instead of its default 10 MB; and it refuses an
// answer whose headers are over the limit all the same, for a transport
// it cannot reach or one the caller set higher afterwards.
func BoundedTransport(next http.RoundTripper) http.RoundTripper {
	if t, err := transportBelow(next); err == nil {
		boundTransport(t)
	}
	return &boundedTransport{next: next}
}

type boundedTransport struct{ next http.RoundTripper }

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, headerLimit(err)
	}
	if n := headerBytes(resp.Header) + headerBytes(resp.Trailer); n > MaxHeaderBytes {
		_ = resp.Body.Close()
		return nil, &HeaderTooLargeError{Limit: MaxHeaderBytes, Err: fmt.Errorf("%d bytes of response headers read by a transport that does not bound them", n)}
	}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 && resp.StatusCode != http.StatusNotModified {
		_ = resp.Body.Close()
		return nil, &RedirectError{Status: resp.Status, Location: resp.Header.Get("Location")}
	}
	limit := bodyLimit(req)
	resp.Body = &limitedBody{rc: resp.Body, left: limit, limit: limit}
	return resp, nil
}

// WrappedRoundTripper lets helpers that close idle connections reach the
// transport below (client-go's utilnet).
func (t *boundedTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// CloseIdleConnections closes the idle connections of the first transport
// below that has any: client-go wraps its transport in one without the
// method (its connection tracker), and closing stops at the first wrapper
// that lacks it, so it would keep every connection for good.
func (t *boundedTransport) CloseIdleConnections() {
	for rt := t.next; rt != nil; {
		if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
			return
		}
		w, ok := rt.(interface{ WrappedRoundTripper() http.RoundTripper })
		if !ok {
			return
		}
		rt = w.WrappedRoundTripper()
	}
}

// limitedBody reads at most left more bytes of a body of at most limit;
// one byte more is an error.
type limitedBody struct {
	rc          io.ReadCloser
	left, limit int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// At the limit: the body is over it if one more byte comes.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, &BodyTooLargeError{Limit: b.limit}
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// HTTPReasons is the reason set of a kind behind an HTTP API whose
// checker maps the API's status codes (401, 403, 404, 400, 429, 5xx) to
// their reasons, with the kind's own extra reasons (a cloud API's
// APIDisabled) before the status reasons of a request that was wrong or
// refused. The status reasons are up: the API answered. It has no
// CredentialsUnavailable: a kind that obtains credentials before it calls
// takes AuthenticatedHTTPReasons, so that an unauthenticated kind's set
// holds no reason it cannot give (docs/development.md: "Adding a
// provider"). A kind that only tells an answer it wants from the rest has
// EngineReasons, NetworkReasons and a reason of its own instead.
func HTTPReasons(extra ...ReasonDef) ReasonSet {
	out := slices.Concat(EngineReasons(), NetworkReasons())
	out = append(out, ReasonSet{
		{ReasonTLSError, false}, {ReasonUnauthorized, true}, {ReasonForbidden, true},
	}...)
	out = append(out, extra...)
	return append(out, ReasonSet{
		{ReasonNotFound, true}, {ReasonInvalidRequest, true}, {ReasonRateLimited, true},
		{ReasonServerError, true}, {ReasonBadResponse, true}, UnknownReason(),
	}...)
}

// AuthenticatedHTTPReasons is HTTPReasons with CredentialsUnavailable
// after TLSError: the set of a kind that obtains credentials (a token, a
// kubeconfig's exec plugin) before it calls, and says so when it cannot.
func AuthenticatedHTTPReasons(extra ...ReasonDef) ReasonSet {
	out := HTTPReasons(extra...)
	at := slices.IndexFunc(out, func(d ReasonDef) bool { return d.Reason == ReasonTLSError }) + 1
	return slices.Insert(out, at, ReasonDef{ReasonCredentialsUnavailable, false})
}

// TransportErrors classifies what went wrong below the HTTP status of an
// API call: the shared part of every HTTP provider's classification
// (docs/security.md: "What the exporter bounds"), with one answer per case. ok is false for an
// error it does not recognise, which the provider classifies further. A
// kind that calls it lists it in KindOf.Classifiers.
//
//   - the context ended, or a step's own timeout (TLS handshake, TCP connect)
//     fired: Timeout, whatever the error says
//   - a 3xx answer, headers over MaxHeaderBytes or a body over
//     MaxBodyBytes: BadResponse
//   - the name did not resolve: DNSFailed
//   - certificate, handshake or alert problems, and an HTTP answer to
//     HTTPS (a TLS record header error): TLSError
//   - refused, reset, unreachable, or closed before an answer (EOF), and
//     any other network operation that failed: Unreachable
var TransportErrors = NewClassifier("provider.TransportErrors", ReasonSet{
	{ReasonTimeout, false}, {ReasonBadResponse, true}, {ReasonDNSFailed, false},
	{ReasonTLSError, false}, {ReasonUnreachable, false},
}, classifyTransport)

func classifyTransport(ctx context.Context, err error) (r Reason, ok bool) {
	var (
		redirect *RedirectError
		tooLarge *BodyTooLargeError
		headers  *HeaderTooLargeError
		dnsErr   *net.DNSError
		netErr   net.Error
	)
	switch {
	case Ended(ctx) || errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout, true
	case errors.As(err, &redirect), errors.As(err, &tooLarge), errors.As(err, &headers):
		return ReasonBadResponse, true
	case errors.As(err, &dnsErr):
		return ReasonDNSFailed, true
	case isTLSError(err):
		return ReasonTLSError, true
	case errors.As(err, &netErr) && netErr.Timeout():
		return ReasonTimeout, true
	case isConnectionError(err):
		return ReasonUnreachable, true
	}
	return "", false
}

// isTLSError reports certificate and handshake failures, alerts, and a
// plain HTTP answer to a TLS client hello.
func isTLSError(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		invalidCert      x509.CertificateInvalidError
		hostname         x509.HostnameError
		verification     *tls.CertificateVerificationError
		recordHeader     tls.RecordHeaderError
		alert            tls.AlertError
		opErr            *net.OpError
	)
	// net/http turns the TLS record error of a plain HTTP answer into
	// ErrSchemeMismatch; an alert the server sent (it rejected our
	// certificate, no common cipher) comes as an OpError named after it.
	return errors.Is(err, http.ErrSchemeMismatch) || errors.As(err, &unknownAuthority) ||
		errors.As(err, &invalidCert) || errors.As(err, &hostname) || errors.As(err, &verification) ||
		errors.As(err, &recordHeader) || errors.As(err, &alert) ||
		(errors.As(err, &opErr) && opErr.Op == "remote error")
}

// isConnectionError reports a connection that could not be made or that
// broke before an answer.
func isConnectionError(err error) bool {
	for _, errno := range []syscall.Errno{
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EPIPE,
	} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var opErr *net.OpError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &opErr)
}

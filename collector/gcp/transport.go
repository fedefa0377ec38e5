package gcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// checkIDHeader carries the id of a check on the Compute request from the
// generated code to deadlineTransport, which removes it.
const checkIDHeader = "X-Provider-Health-Check-Id"

// deadlineTransport gives each Compute request the context of the check
// that made it: the generated REST code creates its request with
// http.NewRequest, so without this a hung server would hold the request
// (and its socket) past the scrape deadline.
//
// It also cuts the answers of calls whose answers are small by nature
// (regions.get and images.get with their field masks) at a limit of their
// own, tighter than provider.MaxBodyBytes: a check asks for several of
// them at once, and several entries check at once.
type deadlineTransport struct {
	seq  atomic.Uint64
	mu   sync.Mutex
	ctxs map[string]registered
}

type registered struct {
	ctx   context.Context
	limit int64 // 0: provider.MaxBodyBytes alone
}

func newDeadlineTransport() *deadlineTransport {
	return &deadlineTransport{ctxs: map[string]registered{}}
}

// register makes ctx the context of requests that carry the returned id
// until done is called, and limit (when not 0) the most read of each of
// their answers.
func (d *deadlineTransport) register(ctx context.Context, limit int64) (id string, done func()) {
	id = strconv.FormatUint(d.seq.Add(1), 10)
	d.mu.Lock()
	d.ctxs[id] = registered{ctx: ctx, limit: limit}
	d.mu.Unlock()
	return id, func() {
		d.mu.Lock()
		delete(d.ctxs, id)
		d.mu.Unlock()
	}
}

func (d *deadlineTransport) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		id := req.Header.Get(checkIDHeader)
		d.mu.Lock()
		reg, ok := d.ctxs[id]
		d.mu.Unlock()
		if !ok {
			// Never send a request that no deadline bounds.
			return nil, errors.New("gcp: Compute request outside a check")
		}
		ctx := reg.ctx
		if reg.limit > 0 {
			// provider.BoundedTransport, below, counts the answer's
			// bytes against this lower limit.
			ctx = provider.WithBodyLimit(ctx, reg.limit)
		}
		r := req.Clone(ctx)
		r.Header.Del(checkIDHeader)
		resp, err := next.RoundTrip(r)
		if err == nil && reg.limit > 0 {
			resp.Body = smallBody{resp.Body}
		}
		return resp, err
	})
}

// smallAnswerLimit is the most read of one regions.get or images.get
// answer (docs/security.md: "What the exporter bounds"). With the field
// masks a region's answer is its quotas (a few KB) and an image's a few
// hundred bytes; a larger answer is BadResponse, however much of it was a
// quota warning.
const smallAnswerLimit = 256 << 10

// answerTooLargeError ends the read of an answer over its smallAnswerLimit.
type answerTooLargeError struct{ limit int64 }

func (e *answerTooLargeError) Error() string {
	return fmt.Sprintf("the answer is larger than the exporter's limit of %d KiB for a region or an image; the read was stopped", e.limit>>10)
}

// smallBody says of an answer that provider.BoundedTransport stopped at
// its smallAnswerLimit what kind of answer it was.
type smallBody struct{ io.ReadCloser }

func (b smallBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if tooLarge, ok := errors.AsType[*provider.BodyTooLargeError](err); ok {
		return n, &answerTooLargeError{limit: tooLarge.Limit}
	}
	return n, err
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

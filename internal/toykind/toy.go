package toykind

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Checker checks that its URL answers 200.
type Checker struct {
	url    string
	client *http.Client
}

// New builds the checker of one entry; it does no I/O. Its connections go
// through the dialer the options give (provider.WithDialer), and its
// requests through provider.BoundedTransport over a transport of its own,
// which bounds headers and bodies and refuses redirects with nothing more
// to call.
func New(e *Entry, _ *slog.Logger, opts ...provider.Option) (*Checker, error) {
	dialer := provider.Apply(opts).Dialer(&net.Dialer{})
	if e.Resolver != "" {
		d := *dialer
		d.Resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", e.Resolver)
		}}
		dialer = &d
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = dialer.DialContext
	tr.DisableKeepAlives = true
	return &Checker{url: e.URL, client: &http.Client{Transport: provider.BoundedTransport(tr)}}, nil
}

// Targets implements provider.Checker.
func (c *Checker) Targets() []provider.Target {
	return []provider.Target{{Name: "url", Address: c.url}}
}

// Check implements provider.Checker: one GET, 200 or not, with the
// capacity and domains the answer gives (readCapacity).
func (c *Checker) Check(ctx context.Context, logger *slog.Logger, _ string) provider.Verdict {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return provider.Verdict{Reason: provider.ReasonUnknown, Message: err.Error()}
	}
	resp, err := c.client.Do(req)
	if err != nil {
		logger.Debug("request failed", "err", err)
		if provider.Ended(ctx) {
			return provider.Verdict{Reason: provider.ReasonTimeout, Message: err.Error()}
		}
		if r, ok := provider.TransportErrors.Classify(ctx, err); ok {
			return provider.Verdict{Reason: r, Message: err.Error()}
		}
		return provider.Verdict{Reason: provider.ReasonUnknown, Message: err.Error()}
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return provider.Verdict{Reason: ReasonHTTPError, Message: resp.Status}
	}
	v := provider.Verdict{Reason: provider.ReasonReady, Message: resp.Status}
	if err := readCapacity(resp.Header, &v); err != nil {
		return provider.Verdict{Reason: provider.ReasonBadResponse, Message: err.Error()}
	}
	return v
}

// readCapacity sets v's capacity and domains from the answer's
// X-Toy-Capacity ("N") and X-Toy-Domain ("NAME CAPACITY PROXIES
// AFTER-LOSS", AFTER-LOSS "-" for none; one header per domain): how the
// tests give a verdict any figures without a real provider. An answer
// without them has no capacity.
func readCapacity(h http.Header, v *provider.Verdict) error {
	if c := h.Get("X-Toy-Capacity"); c != "" {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("X-Toy-Capacity: %q is not a count", c)
		}
		v.Capacity = provider.Capacity{Known: true, Proxies: n, Binding: "toy"}
	}
	for _, d := range h.Values("X-Toy-Domain") {
		f := strings.Fields(d)
		if len(f) != 4 {
			return fmt.Errorf("X-Toy-Domain: %q: want NAME CAPACITY PROXIES AFTER-LOSS", d)
		}
		dom := provider.Domain{Name: f[0]}
		var err1, err2, err3 error
		dom.Capacity, err1 = strconv.ParseInt(f[1], 10, 64)
		dom.Proxies, err2 = strconv.ParseInt(f[2], 10, 64)
		if f[3] != "-" {
			dom.AfterLoss, err3 = strconv.ParseInt(f[3], 10, 64)
			dom.HasAfterLoss = true
		}
		if err := errors.Join(err1, err2, err3); err != nil {
			return fmt.Errorf("X-Toy-Domain: %q: %w", d, err)
		}
		v.Domains = append(v.Domains, dom)
	}
	return nil
}

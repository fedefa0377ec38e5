package toykind

import (
	"context"
	"log/slog"
	"net"
	"net/http"

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

// Check implements provider.Checker: one GET, 200 or not.
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
	return provider.Verdict{Reason: provider.ReasonReady, Message: resp.Status}
}

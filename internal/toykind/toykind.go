// Package toykind is the toy kind of docs/development.md's "Adding a
// provider", written by its recipe alone: a "toy" entry is a URL that must
// answer 200. It is compiled into the exporter only with the toykind build
// tag (internal/kinds/toykind.go), for the test that
// runs it through the real binary; it is not a kind users configure.
package toykind

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// Name is the section key and provider label.
const Name = "toy"

// ReasonHTTPError is the reason of a URL that answered with a status
// other than 200. The server answered, so it is up.
const ReasonHTTPError collector.Reason = "HTTPError"

// Reasons is the kind's own set; Kind adds the reasons of the Transport
// classifier its checker calls.
func Reasons() collector.ReasonSet {
	return append(collector.BaseReasons(), collector.ReasonDef{Reason: ReasonHTTPError, Up: true}, collector.UnknownReason())
}

// Entry is one entry of the toy section.
type Entry struct {
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	// Resolver is the DNS server (host:port) the check asks for the URL's
	// name, instead of the system's: how the test keeps lookups on
	// loopback in the real binary.
	Resolver     string `yaml:"resolver,omitempty"`
	config.Check `yaml:",inline"`
}

// EntryName implements config.Entry.
func (e *Entry) EntryName() string { return e.Name }

// ResolvePaths implements config.Entry: the entry names no file.
func (e *Entry) ResolvePaths(func(*string)) {}

// TargetCount implements config.Entry: one URL.
func (e *Entry) TargetCount() int { return 1 }

// Validate implements config.Entry.
func (e *Entry) Validate(where string) error {
	if e.URL == "" {
		return fmt.Errorf("%s: url: missing (required)", where)
	}
	if u, err := url.Parse(e.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s: url: %q is not an http(s) URL", where, e.URL)
	}
	if e.Resolver != "" {
		if _, _, err := net.SplitHostPort(e.Resolver); err != nil {
			return fmt.Errorf("%s: resolver: %w", where, err)
		}
	}
	return nil
}

// Checker checks that its URL answers 200.
type Checker struct {
	url    string
	client *http.Client
}

// New builds the checker of one entry; it does no I/O.
func New(e *Entry, _ *slog.Logger, opts ...collector.Option) (*Checker, error) {
	dialer := collector.Apply(opts).Dialer(&net.Dialer{})
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
	return &Checker{url: e.URL, client: &http.Client{Transport: collector.BoundedTransport(tr)}}, nil
}

// Targets implements collector.Checker.
func (c *Checker) Targets() []collector.Target {
	return []collector.Target{{Name: "url", Address: c.url}}
}

// Check implements collector.Checker.
func (c *Checker) Check(ctx context.Context, logger *slog.Logger, _ string) collector.Verdict {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return collector.Verdict{Reason: collector.ReasonUnknown, Message: err.Error()}
	}
	resp, err := c.client.Do(req)
	if err != nil {
		logger.Debug("request failed", "err", err)
		if r, ok := collector.Transport.Classify(ctx, err); ok {
			return collector.Verdict{Reason: r, Message: err.Error()}
		}
		return collector.Verdict{Reason: collector.ReasonUnknown, Message: err.Error()}
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return collector.Verdict{Reason: ReasonHTTPError, Message: resp.Status}
	}
	return collector.Verdict{Reason: collector.ReasonReady, Message: resp.Status}
}

// Kind is the toy kind as the table of kinds lists it.
func Kind() collector.Kind {
	return collector.NewKind(collector.KindOf[*Entry, *Checker]{
		Section:     config.Section{Kind: Name, New: func() config.Entry { return &Entry{} }},
		Doc:         Doc(),
		Reasons:     Reasons(),
		Classifiers: []collector.Classifier{collector.Transport},
		NewChecker:  New,
	})
}

package collector

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies/provider_health_exporter/internal/testnet"
)

// boundedClient is a provider's client as the providers build it: the
// default redirect policy, with BoundedTransport below.
func boundedClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	return &http.Client{Transport: BoundedTransport(tr)}
}

func get(ctx context.Context, t *testing.T, c *http.Client, url string) error {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer secret-token")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// listen serves one kind of misbehaviour on a loopback port.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return l.Addr().String()
}

// expired is a context whose deadline has passed though it may not be
// marked done yet: what a check sees when I/O fails right at its deadline.
func expired(t *testing.T) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	t.Cleanup(cancel)
	return ctx
}

// TestClassifyTransport: one answer per transport case, each in the
// classifier's Reasons, from real failures on loopback. Past the deadline every failure is Timeout,
// whatever the error says (docs/configuration.md: "Timeouts").
func TestClassifyTransport(t *testing.T) {
	t.Parallel()
	closed := testnet.RefusedAddr(t)
	reset := listen(t, func(c net.Conn) {
		_, _ = c.Read(make([]byte, 1024))
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
	})
	eof := listen(t, func(c net.Conn) {
		_, _ = c.Read(make([]byte, 1024))
		c.Close()
	})
	silent := listen(t, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c)
	})
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(plain.Close)
	selfSigned := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(selfSigned.Close)

	bg := context.Background()
	for _, tc := range []struct {
		name string
		err  func(t *testing.T) (context.Context, error)
		want Reason
	}{
		{"refused", func(t *testing.T) (context.Context, error) {
			return bg, get(bg, t, boundedClient(), "http://"+closed)
		}, ReasonUnreachable},
		{"reset", func(t *testing.T) (context.Context, error) {
			return bg, get(bg, t, boundedClient(), "http://"+reset)
		}, ReasonUnreachable},
		{"EOF before an answer", func(t *testing.T) (context.Context, error) {
			return bg, get(bg, t, boundedClient(), "http://"+eof)
		}, ReasonUnreachable},
		{"deadline reached", func(t *testing.T) (context.Context, error) {
			ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
			t.Cleanup(cancel)
			return ctx, get(ctx, t, boundedClient(), "http://"+silent)
		}, ReasonTimeout},
		{"a step's own timeout before the deadline", func(t *testing.T) (context.Context, error) {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.ResponseHeaderTimeout = 50 * time.Millisecond
			c := &http.Client{Transport: BoundedTransport(tr)}
			return bg, get(bg, t, c, "http://"+silent)
		}, ReasonTimeout},
		{"refused after the deadline", func(t *testing.T) (context.Context, error) {
			err := get(bg, t, boundedClient(), "http://"+closed)
			return expired(t), err
		}, ReasonTimeout},
		{"EOF after the deadline", func(t *testing.T) (context.Context, error) {
			err := get(bg, t, boundedClient(), "http://"+eof)
			return expired(t), err
		}, ReasonTimeout},
		{"DNS", func(*testing.T) (context.Context, error) {
			return bg, &net.DNSError{Err: "no such host", Name: "compute.invalid", IsNotFound: true}
		}, ReasonDNSFailed},
		{"x509 unknown authority", func(t *testing.T) (context.Context, error) {
			return bg, get(bg, t, boundedClient(), selfSigned.URL)
		}, ReasonTLSError},
		{"TLS record header: HTTP answer to HTTPS", func(t *testing.T) (context.Context, error) {
			return bg, get(bg, t, boundedClient(), strings.Replace(plain.URL, "http://", "https://", 1))
		}, ReasonTLSError},
		{"not a transport error", func(*testing.T) (context.Context, error) {
			return bg, errors.New("something else")
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, err := tc.err(t)
			if err == nil {
				t.Fatal("no error")
			}
			got, ok := Transport.Classify(ctx, err)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("Transport.Classify(%v) = %q, %v; want %q", err, got, ok, tc.want)
			}
			if ok && !Transport.Reasons().Contains(got) {
				t.Errorf("Transport returned %s, which is not in its Reasons %v", got, Transport.Reasons().Reasons())
			}
		})
	}
}

// TestBoundedTransportRefusesRedirects: a 302 to another listener is an
// error naming status and Location; the other listener gets nothing.
func TestBoundedTransportRefusesRedirects(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(other.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/stolen", http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	err := get(context.Background(), t, boundedClient(), srv.URL)
	var redirect *RedirectError
	if !errors.As(err, &redirect) || redirect.Location != other.URL+"/stolen" || !strings.Contains(err.Error(), "302") {
		t.Fatalf("err = %v, want a RedirectError with status 302 and the Location", err)
	}
	if r, _ := Transport.Classify(context.Background(), err); r != ReasonBadResponse {
		t.Errorf("reason %s, want BadResponse", r)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
}

// TestBoundedTransportCapsBodies: a body of exactly MaxBodyBytes is read
// whole; one byte more, or an endless one, ends with BodyTooLargeError.
func TestBoundedTransportCapsBodies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		size int64 // -1: endless
		ok   bool
	}{
		{"at the limit", MaxBodyBytes, true},
		{"one byte over", MaxBodyBytes + 1, false},
		{"endless", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				chunk := make([]byte, 32<<10)
				for sent := int64(0); tc.size < 0 || sent < tc.size; {
					n := min(int64(len(chunk)), tc.size-sent)
					if tc.size < 0 {
						n = int64(len(chunk))
					}
					if _, err := w.Write(chunk[:n]); err != nil {
						return
					}
					sent += n
				}
			}))
			t.Cleanup(srv.Close)
			err := get(context.Background(), t, boundedClient(), srv.URL)
			var tooLarge *BodyTooLargeError
			if tc.ok && err != nil {
				t.Fatalf("err = %v, want the whole body", err)
			}
			if !tc.ok && (!errors.As(err, &tooLarge) || !strings.Contains(err.Error(), "limit of 4 MiB")) {
				t.Fatalf("err = %v, want BodyTooLargeError naming the limit", err)
			}
		})
	}
}

// wrapper is a round tripper without CloseIdleConnections that says what
// it wraps, as client-go's connection tracker does.
type wrapper struct{ next http.RoundTripper }

func (w wrapper) RoundTrip(r *http.Request) (*http.Response, error) { return w.next.RoundTrip(r) }
func (w wrapper) WrappedRoundTripper() http.RoundTripper            { return w.next }

type closeCounter struct {
	http.RoundTripper
	closed int
}

func (c *closeCounter) CloseIdleConnections() { c.closed++ }

// TestCloseIdleConnectionsReachesThroughWrappers: closing idle connections
// goes past wrappers that lack the method to the transport that has them;
// stopping at the first wrapper would keep every connection.
func TestCloseIdleConnectionsReachesThroughWrappers(t *testing.T) {
	t.Parallel()
	inner := &closeCounter{}
	rt := BoundedTransport(wrapper{wrapper{inner}})
	rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	if inner.closed != 1 {
		t.Errorf("the innermost transport's idle connections were closed %d times, want 1", inner.closed)
	}
	// Nothing below with the method: nothing to do, and no panic.
	BoundedTransport(wrapper{http.NewFileTransport(http.Dir("."))}).(interface{ CloseIdleConnections() }).CloseIdleConnections()
}

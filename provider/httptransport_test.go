package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
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
			got, ok := TransportErrors.Classify(ctx, err)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("TransportErrors.Classify(%v) = %q, %v; want %q", err, got, ok, tc.want)
			}
			if ok && !TransportErrors.Reasons().Contains(got) {
				t.Errorf("TransportErrors returned %s, which is not in its Reasons %v", got, TransportErrors.Reasons().Reasons())
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
	if r, _ := TransportErrors.Classify(context.Background(), err); r != ReasonBadResponse {
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

// hugeHeaders is an HTTP/1.1 answer with 9 MB of headers in 8 KiB values,
// then a small body.
var hugeHeaders = func() []byte {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
	value := strings.Repeat("h", 8<<10)
	for i := 0; b.Len() < 9_000_000; i++ {
		fmt.Fprintf(&b, "X-Padding-%d: %s\r\n", i, value)
	}
	b.WriteString("Content-Length: 2\r\nConnection: close\r\n\r\n{}")
	return []byte(b.String())
}()

// TestHeaderBound: an answer with 9 MB of headers is refused at
// MaxHeaderBytes by BoundedTransport, without BoundHeaders, over HTTP/1.1
// and over HTTP/2, as a *HeaderTooLargeError
// that names the limit and classifies as BadResponse; headers under the
// limit pass. Over HTTP/1.1, from a server that writes bytes it built
// beforehand, the client allocates a small part of what was sent.
//
// Not parallel, nor is its HTTP/1.1 part: the allocation it measures is the
// process's, and the package's parallel tests run only once the sequential
// ones are done.
func TestHeaderBound(t *testing.T) {
	// BoundedTransport alone, as a kind builds its client: it bounds the
	// transport below itself.
	bounded := func(t *testing.T, tr *http.Transport) *http.Client {
		t.Helper()
		tr.DisableKeepAlives = true
		return &http.Client{Transport: BoundedTransport(wrapper{tr})}
	}
	wantRefused := func(t *testing.T, err error) {
		t.Helper()
		var tooLarge *HeaderTooLargeError
		if !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), "limit of 64 KiB") {
			t.Fatalf("err = %v, want HeaderTooLargeError naming the limit", err)
		}
		if r, ok := TransportErrors.Classify(context.Background(), err); !ok || r != ReasonBadResponse {
			t.Errorf("classified %s (%v), want BadResponse", r, ok)
		}
	}

	t.Run("HTTP/1.1", func(t *testing.T) {
		addr := listen(t, func(c net.Conn) {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Minute))
			buf := make([]byte, 4096)
			_, _ = c.Read(buf) // the request
			_, _ = c.Write(hugeHeaders)
		})
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := get(context.Background(), t, bounded(t, http.DefaultTransport.(*http.Transport).Clone()), "http://"+addr+"/")
		runtime.ReadMemStats(&after)
		wantRefused(t, err)
		// Loose (a test server's goroutines may still run), but far under
		// the 9 MB net/http's default limit would have read.
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
			t.Errorf("reading the refused answer allocated %d KiB", grew>>10)
		}
	})

	t.Run("HTTP/2", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor != 2 {
				http.Error(w, "want HTTP/2", http.StatusHTTPVersionNotSupported)
				return
			}
			value := strings.Repeat("h", 8<<10)
			n := 1100 // 9 MB
			if r.URL.Path == "/small" {
				n = 4 // 32 KiB: under the limit
			}
			for i := range n {
				w.Header().Set(fmt.Sprintf("X-Padding-%d", i), value)
			}
			_, _ = io.WriteString(w, "{}")
		}))
		srv.EnableHTTP2 = true
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.StartTLS()
		t.Cleanup(srv.Close)
		client := func() *http.Client {
			tr := srv.Client().Transport.(*http.Transport).Clone()
			tr.ForceAttemptHTTP2 = true
			return bounded(t, tr)
		}
		if err := get(context.Background(), t, client(), srv.URL+"/small"); err != nil {
			t.Fatalf("32 KiB of headers: %v, want the answer", err)
		}
		wantRefused(t, get(context.Background(), t, client(), srv.URL+"/"))
	})

	t.Run("no transport to bound", func(t *testing.T) {
		t.Parallel()
		if err := BoundHeaders(wrapper{next: http.DefaultTransport}); err == nil {
			t.Error("BoundHeaders changed http.DefaultTransport")
		}
		if err := BoundHeaders(wrapper{next: &closeCounter{}}); err == nil {
			t.Error("BoundHeaders found a transport where there is none")
		}
	})
}

// opaque is a round tripper that does not say what it wraps: a kind's
// own layer BoundedTransport cannot see through.
type opaque struct{ next http.RoundTripper }

func (o opaque) RoundTrip(r *http.Request) (*http.Response, error) { return o.next.RoundTrip(r) }

// TestBoundedTransportBoundsHeadersItself: a kind that never calls
// BoundHeaders gets the bound all the same. The transport below is
// bounded when BoundedTransport is built (and one already bounded lower
// is left as it is); below a layer it cannot see through, to a transport
// that accepts 10 MB, 1 MiB of headers is still refused as a
// *HeaderTooLargeError, BadResponse, and 32 KiB pass.
func TestBoundedTransportBoundsHeadersItself(t *testing.T) {
	t.Parallel()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	BoundedTransport(wrapper{tr})
	if tr.MaxResponseHeaderBytes != MaxHeaderBytes {
		t.Errorf("the transport below accepts %d bytes of headers, want %d", tr.MaxResponseHeaderBytes, MaxHeaderBytes)
	}
	lower := http.DefaultTransport.(*http.Transport).Clone()
	lower.MaxResponseHeaderBytes = 1 << 10
	BoundedTransport(lower)
	if lower.MaxResponseHeaderBytes != 1<<10 {
		t.Errorf("a transport bounded lower now accepts %d bytes", lower.MaxResponseHeaderBytes)
	}
	BoundedTransport(http.DefaultTransport)
	if n := http.DefaultTransport.(*http.Transport).MaxResponseHeaderBytes; n != 0 {
		t.Errorf("http.DefaultTransport was changed to %d bytes", n)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 128 // 1 MiB
		if r.URL.Path == "/small" {
			n = 4
		}
		for i := range n {
			w.Header().Set(fmt.Sprintf("X-Padding-%d", i), strings.Repeat("h", 8<<10))
		}
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(srv.Close)
	loose := http.DefaultTransport.(*http.Transport).Clone()
	loose.DisableKeepAlives = true
	loose.MaxResponseHeaderBytes = 10 << 20
	client := &http.Client{Transport: BoundedTransport(opaque{loose})}
	if loose.MaxResponseHeaderBytes != 10<<20 {
		t.Fatal("BoundedTransport saw through opaque")
	}
	if err := get(context.Background(), t, client, srv.URL+"/small"); err != nil {
		t.Fatalf("32 KiB of headers: %v, want the answer", err)
	}
	err := get(context.Background(), t, client, srv.URL+"/")
	var tooLarge *HeaderTooLargeError
	if !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), "limit of 64 KiB") {
		t.Fatalf("1 MiB of headers through a transport that accepts 10 MB: err = %v, want HeaderTooLargeError naming the limit", err)
	}
	if r, ok := TransportErrors.Classify(context.Background(), err); !ok || r != ReasonBadResponse {
		t.Errorf("classified %s (%v), want BadResponse", r, ok)
	}
}

// TestBoundHeadersLowersAHigherLimit: a transport that accepts more than
// MaxHeaderBytes of headers (net/http's 10 MB default written out, or
// one byte over the bound) is lowered to MaxHeaderBytes, by
// BoundedTransport and by BoundHeaders; one at the bound is left at it.
func TestBoundHeadersLowersAHigherLimit(t *testing.T) {
	t.Parallel()
	for _, limit := range []int64{10 << 20, MaxHeaderBytes + 1, MaxHeaderBytes, 0, -1} {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxResponseHeaderBytes = limit
		BoundedTransport(wrapper{tr})
		if tr.MaxResponseHeaderBytes != MaxHeaderBytes {
			t.Errorf("BoundedTransport: a transport that accepted %d bytes of headers now accepts %d, want %d", limit, tr.MaxResponseHeaderBytes, MaxHeaderBytes)
		}
		tr = http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxResponseHeaderBytes = limit
		if err := BoundHeaders(wrapper{tr}); err != nil || tr.MaxResponseHeaderBytes != MaxHeaderBytes {
			t.Errorf("BoundHeaders: a transport that accepted %d bytes of headers now accepts %d (%v), want %d", limit, tr.MaxResponseHeaderBytes, err, MaxHeaderBytes)
		}
	}
}

// fixedAnswer answers every request with a 200 whose headers are h.
type fixedAnswer struct{ h http.Header }

func (f fixedAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: f.h, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
}

// TestHeaderBoundAtTheLimit: headers of exactly MaxHeaderBytes, as
// headerBytes counts them ("Key: value\r\n"), pass BoundedTransport's own
// check ("over the limit" is refused), and one byte more is a
// *HeaderTooLargeError, from a transport it cannot bound.
func TestHeaderBoundAtTheLimit(t *testing.T) {
	t.Parallel()
	const key = "X-Padding"
	for _, c := range []struct {
		size    int64
		refused bool
	}{{MaxHeaderBytes - 1, false}, {MaxHeaderBytes, false}, {MaxHeaderBytes + 1, true}} {
		h := http.Header{key: {strings.Repeat("h", int(c.size)-len(key)-4)}}
		if n := headerBytes(h); n != c.size {
			t.Fatalf("headers of %d bytes, want %d", n, c.size)
		}
		client := &http.Client{Transport: BoundedTransport(opaque{fixedAnswer{h}})}
		err := get(context.Background(), t, client, "http://127.0.0.1:1/")
		var tooLarge *HeaderTooLargeError
		switch {
		case c.refused && !errors.As(err, &tooLarge):
			t.Errorf("%d bytes of headers: %v, want a HeaderTooLargeError", c.size, err)
		case !c.refused && err != nil:
			t.Errorf("%d bytes of headers: %v, want the answer", c.size, err)
		}
	}
}

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slack is added to every documented bound before a test calls it broken:
// the bound is what the server promises, the slack what a loaded machine
// may add before the close is seen.
const slack = 30 * time.Second

// hostile is one misbehaving client connection and when the server must
// have closed it by.
type hostile struct {
	kind  string
	conn  net.Conn
	bound time.Duration // after the client's last write
	last  time.Time
}

// TestHostileClientsCannotStarveScrapes runs the real binary with the
// default --web.max-requests (40) and opens 40 connections that misbehave
// as the Security page lists (docs/security.md: "What the exporter
// bounds"): a POST announcing a body it never sends, a body sent a byte at
// a time, a keep-alive connection left idle, headers never finished. While they are open every check endpoint answers;
// the two that announce a body are answered 413 and closed at once. That the
// other two are closed at their bounds (30s idle, 10s for the header) is
// shown in fake time by TestClientBoundsInFakeTime, not waited for here.
func TestHostileClientsCannotStarveScrapes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "key"), "not a key")
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, "kvm:\n  - name: lab\n    user: proxyops\n    private_key_file: key\n    insecure_ignore_host_key: true\n    hosts:\n      - address: 127.0.0.1:1\n        name: h\n")
	var logs syncBuffer
	_, _, addr := startExporter(t, dir, &logs, "--config.file="+cfgPath)
	client := &http.Client{Timeout: 60 * time.Second}
	get := func(path string) (int, string) {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(60 * time.Second)
	for code, _ := get("/-/healthy"); code != http.StatusOK; code, _ = get("/-/healthy") {
		if time.Now().After(deadline) {
			t.Fatalf("exporter not healthy; log:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	send := func(h *hostile, s string) {
		if _, err := io.WriteString(h.conn, s); err != nil {
			t.Fatalf("%s: %v", h.kind, err)
		}
		h.last = time.Now()
	}
	var clients []*hostile
	for i := range 40 {
		h := &hostile{conn: dial()}
		switch i % 4 {
		case 0:
			h.kind, h.bound = "body announced, never sent", 0
			send(h, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
		case 1:
			h.kind, h.bound = "slow body", 0
			send(h, "POST /probe?name=lab HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok3n-secret\r\nContent-Length: 100000\r\n\r\npassword=s3cret")
		case 2:
			h.kind, h.bound = "idle keep-alive", idleTimeout
			send(h, "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(h.conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			h.last = time.Now()
		case 3:
			h.kind, h.bound = "headers never finished", readHeaderTimeout
			send(h, "GET /metrics HTTP/1.1\r\nHost: x\r\n")
		}
		clients = append(clients, h)
	}

	// Every check endpoint answers while they are connected, and none
	// with 503 (--web.max-requests).
	for _, path := range []string{"/metrics", "/probe?name=lab", "/api/v1/status", "/metrics"} {
		if code, body := get(path); code != http.StatusOK {
			t.Errorf("GET %s with 40 hostile connections open: %d %s", path, code, body)
		}
	}

	var wg sync.WaitGroup
	for _, h := range clients {
		if h.bound != 0 {
			continue // closed by the test's cleanup
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = h.conn.SetReadDeadline(h.last.Add(slack))
			b, err := io.ReadAll(h.conn)
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("%s: still open %s after its last write, want it closed at once", h.kind, time.Since(h.last).Round(time.Second))
				return
			}
			if !bytes.HasPrefix(b, []byte("HTTP/1.1 413 ")) {
				t.Errorf("%s: answer %q, want 413", h.kind, b)
			}
		}()
	}
	wg.Wait()
	for _, bad := range []string{"panic", "tok3n-secret", "s3cret"} {
		if strings.Contains(logs.String(), bad) {
			t.Errorf("the exporter's log contains %q:\n%s", bad, logs.String())
		}
	}
}

// TestRefuseBody: a request announcing a body is answered 413 and closed
// without the handler running or the body being read; a request without
// one goes through.
func TestRefuseBody(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	srv := &http.Server{Handler: refuseBody(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ran.Add(1)
		fmt.Fprintln(w, "ok")
	}))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	for _, req := range []string{
		"POST /-/reload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n",
		"POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n",
	} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(slack))
		b, err := io.ReadAll(c) // ends only when the server closes
		c.Close()
		if err != nil || !bytes.HasPrefix(b, []byte("HTTP/1.1 413 ")) || !bytes.Contains(b, []byte("Connection: close")) {
			t.Errorf("%q: answer %q, %v; want 413 and the connection closed", req, b, err)
		}
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the handler ran %d times for requests with a body", n)
	}
	resp, err := http.Post("http://"+ln.Addr().String()+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || ran.Load() != 1 {
		t.Errorf("POST without a body: %d, handler ran %d times; want 200 once", resp.StatusCode, ran.Load())
	}
}

// TestConnLimit: connections that have sent nothing are given up oldest
// first, at most half the limit of them kept; connections that were served
// and wait between requests are kept, and a new connection beyond the limit
// is then refused.
func TestConnLimit(t *testing.T) {
	t.Parallel()
	const limit, extra = 6, 3
	srv := boundedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }),
		limit/4, func() time.Duration { return time.Minute })
	cl := &connLimit{max: limit}
	srv.ConnState, srv.Handler = cl.track, cl.markServed(srv.Handler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	request := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(slack))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}

	silent := make([]net.Conn, limit/2+extra)
	for i := range silent {
		silent[i] = dial()
	}
	// The server has seen them all before any speaks, however slow the
	// machine: the evictions happen in the order they came.
	for seen := 0; seen < len(silent); {
		cl.mu.Lock()
		seen = cl.accepted
		cl.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	for i, c := range silent {
		err := request(c)
		if kept := i >= extra; kept != (err == nil) {
			t.Errorf("silent connection %d of %d: %v; want the %d oldest closed, the rest served", i, len(silent), err, extra)
		}
	}
	// Fill the limit with served, keep-alive connections: nothing
	// pending is left to give up, so a new connection is refused.
	for range limit - limit/2 {
		if err := request(dial()); err != nil {
			t.Fatalf("connection within the limit: %v", err)
		}
	}
	if err := request(dial()); err == nil {
		t.Error("a connection beyond the limit of served connections was served")
	}
}

func TestMaxConnections(t *testing.T) {
	t.Parallel()
	for in, want := range map[int]int{0: unlimitedConns, 1: minConns, 40: 160, 100: 400} {
		if got := maxConnections(in); got != want {
			t.Errorf("maxConnections(%d) = %d, want %d", in, got, want)
		}
	}
}

// syncBuffer is a bytes.Buffer the process's output can be written to while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTinyScrapeTimeoutIsRefused: a header that rounds below a millisecond
// is a 400 on every check endpoint, never "no header".
func TestTinyScrapeTimeoutIsRefused(t *testing.T) {
	t.Parallel()
	_, srv, _ := newTestExporter(t, "gcp:\n  - name: g\n    project: p\n", nil, 0)
	for _, path := range []string{"/metrics", "/probe?name=g"} {
		for _, v := range []string{"1e-9", "1e-10", "0x1p-40"} {
			if code, body := get(t, srv.Client(), srv.URL+path, map[string]string{"X-Prometheus-Scrape-Timeout-Seconds": v}); code != http.StatusBadRequest || !strings.Contains(body, "below the minimum of 1ms") {
				t.Errorf("%s with header %s: %d %s, want 400", path, v, code, body)
			}
		}
	}
}

// TestWriteDeadline: a client that never reads its response does not keep
// the handler writing forever; it ends at the write deadline.
func TestWriteDeadline(t *testing.T) {
	t.Parallel()
	done := make(chan error, 1)
	srv := &http.Server{Handler: writeDeadline(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 1<<20)
		for {
			if _, err := w.Write(chunk); err != nil {
				done <- err
				return
			}
		}
	}), func() time.Duration { return 200 * time.Millisecond })}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("write failed with %v, want a timeout", err)
		}
	case <-time.After(slack):
		t.Fatal("the handler is still writing to a client that does not read")
	}
}

// TestProfileOutlivesWriteDeadline: a CPU profile longer than the write
// deadline every other answer gets is still delivered whole.
func TestProfileOutlivesWriteDeadline(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	handlePprof(mux)
	srv := httptest.NewServer(boundedServer(mux, 40, func() time.Duration { return 100 * time.Millisecond }).Handler)
	t.Cleanup(srv.Close)
	for _, path := range []string{"/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=0.5"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s: %d, %d bytes, %v; want the profile", path, resp.StatusCode, len(body), err)
		}
	}
}

// TestHalfHeadersCannotLockOutScrapes: connections that hold half a
// request header fill the connection cap, yet every scrape that follows
// is served: the oldest header-pending connections make room.
func TestHalfHeadersCannotLockOutScrapes(t *testing.T) {
	t.Parallel()
	const maxRequests = 40 // the default: 160 connections at most
	srv := boundedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }),
		maxRequests, func() time.Duration { return time.Minute })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	for range maxConnections(maxRequests) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Half: "); err != nil {
			t.Fatal(err)
		}
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 10 {
		req, err := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "10")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("scrape %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("scrape %d: %s", i, resp.Status)
		}
	}
}

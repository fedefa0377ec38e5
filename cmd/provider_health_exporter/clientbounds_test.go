package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestClientBoundsInFakeTime: the server the exporter runs (boundedServer)
// closes each misbehaving connection at its documented bound
// (docs/security.md: "What the exporter bounds"), after the client's last
// write and not before: a POST announcing a body at once (413), a keep-alive connection
// left idle after 30s, a request header never finished after 10s. The
// server runs in a synctest bubble on in-memory connections, so the bounds
// pass on the fake clock: the test takes no real time waiting for them and
// holds however slow the machine.
func TestClientBoundsInFakeTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		srv := boundedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }),
			40, func() time.Duration { return time.Minute })
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()

		type closed struct {
			kind        string
			bound, took time.Duration
			answer      []byte
		}
		results := make(chan closed, 4)
		var wg sync.WaitGroup
		// watch reads c until the server closes it and reports how long
		// after last that was. Should the server never close it, the
		// test does, a minute of fake time past the bound, and the
		// report shows that.
		watch := func(kind string, bound time.Duration, c net.Conn, r io.Reader, last time.Time) {
			wg.Go(func() {
				guard := time.AfterFunc(bound+time.Minute, func() { c.Close() })
				defer guard.Stop()
				b, _ := io.ReadAll(r)
				results <- closed{kind, bound, time.Since(last), b}
				c.Close()
			})
		}
		send := func(c net.Conn, s string) time.Time {
			if _, err := io.WriteString(c, s); err != nil {
				t.Fatal(err)
			}
			return time.Now()
		}

		c := ln.dial()
		last := send(c, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
		watch("body announced, never sent", 0, c, c, last)

		c = ln.dial()
		last = send(c, "POST /probe?name=lab HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\npassword=s3cret")
		watch("slow body", 0, c, c, last)

		c = ln.dial()
		send(c, "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		watch("idle keep-alive", 30*time.Second, c, br, time.Now())

		c = ln.dial()
		last = send(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n")
		watch("headers never finished", 10*time.Second, c, c, last)

		wg.Wait()
		close(results)
		for r := range results {
			if r.took != r.bound {
				t.Errorf("%s: closed %v after the client's last write, want %v", r.kind, r.took, r.bound)
			}
			if r.bound == 0 && !bytes.HasPrefix(r.answer, []byte("HTTP/1.1 413 ")) {
				t.Errorf("%s: answer %q, want 413", r.kind, r.answer)
			}
		}
	})
}

// pipeListener hands out in-memory connections (net.Pipe): an http.Server
// serving it runs inside a synctest bubble, its deadlines on the fake clock,
// where a TCP listener would not (a goroutine waiting on the network is not
// durably blocked, so fake time would never advance).
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

// dial connects to the listener and returns the client's end.
func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

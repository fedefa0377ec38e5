package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// The bounds the HTTP server puts on clients (docs/security.md: "What the exporter bounds"). They are
// derived rather than flags: each follows from what the exporter serves.
const (
	// readHeaderTimeout closes a connection whose request line and
	// headers have not arrived in time.
	readHeaderTimeout = 10 * time.Second
	// idleTimeout closes a keep-alive connection that sends no new
	// request. Prometheus reconnects when it needs to.
	idleTimeout = 30 * time.Second
	// writeGrace is added to the longest provider timeout to get the
	// write deadline of a response: the answer is written once the
	// budget ends, whatever the providers do, so a client still not
	// taking it after that is not reading.
	writeGrace = 10 * time.Second
	// minConns is the least number of open connections allowed.
	minConns = 64
	// unlimitedConns caps connections when --web.max-requests is 0.
	unlimitedConns = 1024
	// maxHeaderBytes bounds a request's header (net/http's default is
	// 1 MiB): a scrape's or a browser's is a few KiB, and twenty clients
	// sending a megabyte each would hold twenty megabytes before any
	// handler runs. More is answered 431 by net/http.
	maxHeaderBytes = 64 << 10
)

// maxConnections is how many client connections may be open at once: four
// per request slot (a scrape in flight, keep-alive connections of the
// Prometheus servers, a browser), at least minConns.
func maxConnections(maxRequests int) int {
	if maxRequests <= 0 {
		return unlimitedConns
	}
	return max(4*maxRequests, minConns)
}

// longestTimeout is the longest check timeout of cfg, the longest a check
// of a request can run; the default timeout when nothing is configured.
func longestTimeout(cfg *config.Config) time.Duration {
	longest := time.Duration(config.DefaultTimeout)
	if cfg == nil {
		return longest
	}
	for _, e := range cfg.AllEntries() {
		if e != nil {
			longest = max(longest, e.Settings().TimeoutDuration())
		}
	}
	return longest
}

// newServer wraps h in the bounds on clients. net/http's own ReadTimeout is
// left unset on purpose: when it expires while a handler runs, net/http
// cancels the request's context, which would end a check early; no path
// reads a request body, so there is no body to bound.
func newServer(h http.Handler, x *exporter, maxRequests int) *http.Server {
	return boundedServer(h, maxRequests, func() time.Duration { return longestTimeout(x.config()) + writeGrace })
}

// boundedServer is newServer with the write deadline given by writeAfter.
func boundedServer(h http.Handler, maxRequests int, writeAfter func() time.Duration) *http.Server {
	conns := &connLimit{max: maxConnections(maxRequests)}
	return &http.Server{
		Handler:           conns.markServed(refuseBody(writeDeadline(h, writeAfter))),
		ReadHeaderTimeout: readHeaderTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		IdleTimeout:       idleTimeout,
		ConnState:         conns.track,
		ConnContext:       withConn,
	}
}

// writeDeadline gives every response a write deadline: the longest check the
// current configuration can run plus writeGrace. It is set per request
// because a reload can change the timeouts.
func writeDeadline(next http.Handler, after func() time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(after()))
		next.ServeHTTP(w, r)
	})
}

// refuseBody answers 413 to a request that announces a body and closes the
// connection without reading it. No path takes a body; net/http would
// otherwise read up to 256 KiB of it before writing the response, inside
// the handler, which holds a --web.max-requests slot for as long as the
// client takes to send it.
func refuseBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		const msg = "request bodies are not accepted\n"
		// Hijacking hands the connection over before net/http reads any
		// of the body; HTTP/2 cannot be hijacked, and does not need it:
		// its bodies do not block the response.
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			w.Header().Set("Connection", "close")
			http.Error(w, msg, http.StatusRequestEntityTooLarge)
			return
		}
		defer conn.Close()
		_ = conn.SetWriteDeadline(time.Now().Add(readHeaderTimeout))
		fmt.Fprintf(buf, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %s\r\n\r\n%s",
			strconv.Itoa(len(msg)), msg)
		_ = buf.Flush()
	})
}

// connLimit bounds the open client connections so that idle or slow
// clients cannot use up the process's file descriptors (docs/security.md: "Security").
// A connection still sending its request header (pending: accepted, or
// back from keep-alive, and no handler started yet) is the cheapest for a
// client to hold, so those are the ones given up: when maxConnections are
// open, or more than half of them are pending, the oldest pending
// connection is closed to make room for a new one. A client holding
// connections open with half a header therefore cannot lock Prometheus
// out; it only loses its oldest ones. A new connection is refused only
// when every open one is being served or idle between requests, and the
// timeouts above close all of them in the end.
type connLimit struct {
	max     int
	mu      sync.Mutex
	open    int
	pending map[net.Conn]time.Time // since when each pending connection waits
	// evicted are closed connections whose StateClosed has not come yet:
	// they no longer count as open.
	evicted map[net.Conn]bool
	// accepted counts every connection ever seen, for tests.
	accepted int
}

func (l *connLimit) track(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending, l.evicted = map[net.Conn]time.Time{}, map[net.Conn]bool{}
	}
	switch s {
	case http.StateNew:
		l.accepted++
		l.open++
		l.pending[c] = time.Now()
		if l.open > l.max || len(l.pending) > max(l.max/2, 1) {
			l.evictLocked(c)
		}
	case http.StateIdle:
		delete(l.pending, c)
	case http.StateActive:
		// Back from keep-alive, or new: waits for its header until a
		// handler starts (served).
		if _, ok := l.pending[c]; !ok {
			l.pending[c] = time.Now()
		}
	case http.StateHijacked, http.StateClosed:
		if l.evicted[c] {
			delete(l.evicted, c)
			return
		}
		l.open--
		delete(l.pending, c)
	}
}

// evictLocked closes the oldest pending connection, which is newest when no
// other is pending.
func (l *connLimit) evictLocked(newest net.Conn) {
	oldest, since := newest, l.pending[newest]
	for c, t := range l.pending {
		if t.Before(since) {
			oldest, since = c, t
		}
	}
	delete(l.pending, oldest)
	l.evicted[oldest] = true
	l.open--
	_ = oldest.Close()
}

// served marks c as no longer pending: a handler runs for it, so its
// request header arrived whole.
func (l *connLimit) served(c net.Conn) {
	l.mu.Lock()
	delete(l.pending, c)
	l.mu.Unlock()
}

type connKey struct{}

// markServed tells l, when a handler starts, that the request's connection
// delivered its header.
func (l *connLimit) markServed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
			l.served(c)
		}
		next.ServeHTTP(w, r)
	})
}

// withConn puts the connection into its requests' contexts, for markServed.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

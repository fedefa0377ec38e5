// Package fakedns is a loopback name server that knows no names, for tests
// that must provoke DNS failures without ever asking the machine's resolver.
package fakedns

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Resolver returns a resolver whose every query goes to a loopback server
// that answers NXDOMAIN, whatever /etc/resolv.conf says. The server stops
// when the test ends.
func Resolver(t testing.TB) *net.Resolver {
	t.Helper()
	server := serve(t)
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", server)
		},
	}
}

// Dialer returns a dialer for a checker's WithDialer option whose name
// lookups go to Resolver's server, and fails the test when the test ends
// without a lookup: a checker that ignored the dialer would otherwise pass
// on a machine whose own resolver fails too.
func Dialer(t testing.TB) *net.Dialer {
	t.Helper()
	r := Resolver(t)
	var asked atomic.Bool
	dial := r.Dial
	r.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		asked.Store(true)
		return dial(ctx, network, address)
	}
	t.Cleanup(func() {
		if !asked.Load() {
			t.Error("no name was looked up through the dialer's resolver")
		}
	})
	return &net.Dialer{Resolver: r}
}

// Server starts the loopback name server Resolver asks, for a process
// that takes a name server's address (host:port) instead of a resolver,
// and returns that address. It stops when the test ends.
func Server(t testing.TB) string {
	t.Helper()
	return serve(t)
}

func serve(t testing.TB) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if msg := NXDomain(buf[:n]); msg != nil {
				_, _ = pc.WriteTo(msg, from)
			}
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	return pc.LocalAddr().String()
}

// NXDomain turns a DNS query into its NXDOMAIN answer, or nil when the
// query does not parse.
func NXDomain(query []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true, RCode: dnsmessage.RCodeNameError,
	})
	if b.StartQuestions() != nil || b.Question(q) != nil {
		return nil
	}
	msg, err := b.Finish()
	if err != nil {
		return nil
	}
	return msg
}

package fakedns

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

func TestResolverSaysNotFound(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Resolver(t).LookupHost(ctx, "compute.nxdomain.test")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("err = %v, want a not-found *net.DNSError", err)
	}
}

func TestNXDomainIgnoresGarbage(t *testing.T) {
	t.Parallel()
	if NXDomain([]byte{1, 2, 3}) != nil {
		t.Error("answered a query that does not parse")
	}
}

func TestDialerResolvesThroughTheFake(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dialer(t).DialContext(ctx, "tcp", "apiserver.nxdomain.test:443")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("err = %v, want a not-found *net.DNSError", err)
	}
}

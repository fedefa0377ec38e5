package provider

import "net"

// Option adjusts how the checker a provider package's New builds reaches
// its provider; every kind's New takes the same options (KindOf.NewChecker).
type Option func(*Options)

// Options are the options a checker was built with, as Apply gives them.
type Options struct {
	dialer *net.Dialer
}

// WithDialer makes the checker open every connection to its provider (and
// to the provider's token endpoint, where it has one) with d instead of
// its default dialer; d's Resolver resolves their names. For private DNS,
// and for tests that must keep every packet on loopback. A nil d keeps the
// default.
func WithDialer(d *net.Dialer) Option {
	return func(o *Options) {
		if d != nil {
			o.dialer = d
		}
	}
}

// Apply gives the options opts set.
func Apply(opts []Option) Options {
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Dialer is the dialer WithDialer set, or def.
func (o Options) Dialer(def *net.Dialer) *net.Dialer {
	if o.dialer == nil {
		return def
	}
	return o.dialer
}

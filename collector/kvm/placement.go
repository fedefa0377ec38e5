package kvm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The placement reasons of a KVM host (docs/metrics.md: "Reasons"): libvirtd
// answered, so up = 1, and the pool is usable, but a proxy could not be
// created from the base volume or attached to the network.
const (
	// ReasonVolumeMissing: no volume named volume in the pool.
	ReasonVolumeMissing provider.Reason = "VolumeMissing"
	// ReasonNetworkMissing: no libvirt network named network.
	ReasonNetworkMissing provider.Reason = "NetworkMissing"
	// ReasonNetworkInactive: the network is defined but not started.
	ReasonNetworkInactive provider.Reason = "NetworkInactive"
)

// libvirtCode tells whether err carries libvirt's error code.
func libvirtCode(err error, code libvirt.ErrorNumber) bool {
	var lerr libvirt.Error
	return errors.As(err, &lerr) && lerr.Code == uint32(code)
}

// checkPlacement checks the host's volume and network, when set, on s, in
// the order of docs/configuration.md ("KVM"): VolumeMissing before
// NetworkMissing before NetworkInactive. It is called only when the pool is
// usable and has room; it sets r's reason (and error) when a check fails.
func (c *Checker) checkPlacement(ctx context.Context, logger *slog.Logger, h *host, s *session, r *result) {
	if h.volume != "" {
		r.reason, r.err = c.checkVolume(ctx, logger, h, s, r.handle)
		if r.reason != provider.ReasonReady {
			return
		}
	}
	if h.network != "" {
		r.reason, r.message, r.err = c.checkNetwork(ctx, logger, h, s)
	}
}

// checkVolume looks the base volume up in the pool whose handle the pool
// check used: one call. Looking it up by name is also how libvirt answers
// about a kept volume handle (by its pool and name), so keeping one would
// save nothing.
func (c *Checker) checkVolume(ctx context.Context, logger *slog.Logger, h *host, s *session, pool libvirt.StoragePool) (provider.Reason, error) {
	lv := loggedClient{next: s.lv, logger: logger}
	err := s.call(ctx, func() error {
		_, err := lv.StorageVolLookupByName(pool, h.volume)
		return err
	})
	switch {
	case err == nil:
		return provider.ReasonReady, nil
	case provider.Ended(ctx):
	case libvirtCode(err, libvirt.ErrNoStorageVol):
		return ReasonVolumeMissing, fmt.Errorf("volume %q not found in pool %q: %w", h.volume, h.pool, err)
	case libvirtCode(err, libvirt.ErrNoStoragePool):
		// The pool went away since its info was read.
		s.forgetPool()
		return ReasonPoolMissing, fmt.Errorf("look up volume %q: pool %q is gone: %w", h.volume, h.pool, err)
	}
	return h.callFailed(ctx, logger, s, fmt.Errorf("look up volume %q in pool %q: %w", h.volume, h.pool, err))
}

// checkNetwork asks whether the network is active: one call on the
// network's kept handle, which is looked up again, once, when libvirt says
// the network it names is gone (undefined, or defined again under the same
// name with a new UUID).
func (c *Checker) checkNetwork(ctx context.Context, logger *slog.Logger, h *host, s *session) (provider.Reason, string, error) {
	lv := loggedClient{next: s.lv, logger: logger}
	var active int32
	err := s.call(ctx, func() error {
		n, kept := s.networkHandle(h.network)
		if !kept {
			var err error
			if n, err = lv.NetworkLookupByName(h.network); err != nil {
				return err
			}
		}
		var err error
		active, err = lv.NetworkIsActive(n)
		if kept && libvirtCode(err, libvirt.ErrNoNetwork) {
			logger.Debug("the kept network handle is stale, looking the network up again", "network", h.network, "err", err)
			s.forgetNetwork()
			if n, err = lv.NetworkLookupByName(h.network); err != nil {
				return err
			}
			active, err = lv.NetworkIsActive(n)
		}
		if err == nil {
			s.keepNetwork(n)
		}
		return err
	})
	switch {
	case err == nil && active == 0:
		return ReasonNetworkInactive, fmt.Sprintf("network %q is defined but not active: start it (virsh net-start %s) and mark it for autostart (virsh net-autostart %s) so that it survives a host reboot",
			h.network, h.network, h.network), nil
	case err == nil:
		return provider.ReasonReady, "", nil
	case provider.Ended(ctx):
	case libvirtCode(err, libvirt.ErrNoNetwork):
		return ReasonNetworkMissing, "", fmt.Errorf("network %q not found: %w", h.network, err)
	}
	reason, err := h.callFailed(ctx, logger, s, fmt.Errorf("check network %q: %w", h.network, err))
	return reason, "", err
}

func (c loggedClient) StorageVolLookupByName(pool libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	start := time.Now()
	v, err := c.next.StorageVolLookupByName(pool, name)
	c.log("StorageVolLookupByName", start, err, slog.String("pool", pool.Name), slog.String("volume", name))
	return v, err
}

func (c loggedClient) NetworkLookupByName(name string) (libvirt.Network, error) {
	start := time.Now()
	n, err := c.next.NetworkLookupByName(name)
	c.log("NetworkLookupByName", start, err, slog.String("network", name))
	return n, err
}

func (c loggedClient) NetworkIsActive(n libvirt.Network) (int32, error) {
	start := time.Now()
	a, err := c.next.NetworkIsActive(n)
	c.log("NetworkIsActive", start, err, slog.String("network", n.Name), slog.Int("active", int(a)))
	return a, err
}

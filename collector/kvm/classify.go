package kvm

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/egress-proxies/provider_health_exporter/collector"
)

// Reasons is the closed reason set of a KVM host (docs/metrics.md: "Reasons"): every
// one of them is exported on every scrape as a state set.
func Reasons() []collector.Reason {
	return []collector.Reason{
		collector.ReasonReady, collector.ReasonTimeout, collector.ReasonUnreachable, collector.ReasonDNSFailed,
		collector.ReasonSSHMaterialInvalid, collector.ReasonSSHAuthFailed, collector.ReasonSSHHandshakeFailed,
		collector.ReasonHostKeyUnknown, collector.ReasonHostKeyMismatch, collector.ReasonLibvirtSocketUnavailable,
		collector.ReasonLibvirtConnectFailed, collector.ReasonLibvirtConnectionLost, collector.ReasonPoolMissing,
		collector.ReasonPoolInactive, collector.ReasonPoolBuilding, collector.ReasonPoolDegraded, collector.ReasonPoolInaccessible,
		collector.ReasonUnknown,
	}
}

// authFailure is how x/crypto/ssh says the server rejected every key we
// offered; it exposes no error type for it (TestAuthFailureString pins it).
const authFailure = "ssh: unable to authenticate"

// classify derives the reason of a failed dial from its stage and cause
// (docs/metrics.md: "Reasons"; docs/configuration.md: "KVM"). The end of ctx or of dial_timeout wins over
// whatever the error says.
func classify(ctx context.Context, err error) collector.Reason {
	var silent *silentServerError
	if collector.Ended(ctx) || errors.Is(err, &dialTimeoutError{}) || errors.As(err, &silent) {
		return collector.ReasonTimeout
	}
	var de *dialError
	if !errors.As(err, &de) {
		return collector.ReasonUnknown
	}
	switch de.Stage {
	case stageMaterial:
		return collector.ReasonSSHMaterialInvalid
	case stageTCP:
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The dialer took its deadline from ctx.
			return collector.ReasonTimeout
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return collector.ReasonDNSFailed
		}
		// Refused, reset, no route: every other failure to connect.
		return collector.ReasonUnreachable
	case stageHandshake:
		var keyErr *knownhosts.KeyError
		if errors.As(err, &keyErr) {
			if len(keyErr.Want) == 0 {
				return collector.ReasonHostKeyUnknown
			}
			return collector.ReasonHostKeyMismatch
		}
		var revoked *knownhosts.RevokedError
		if errors.As(err, &revoked) {
			return collector.ReasonHostKeyMismatch
		}
		if strings.Contains(err.Error(), authFailure) {
			return collector.ReasonSSHAuthFailed
		}
		return collector.ReasonSSHHandshakeFailed
	case stageLibvirt:
		var fe *frameError
		if errors.As(err, &fe) {
			// The peer does not speak libvirt's protocol as libvirtd
			// does; no reason of the set says more than that.
			return collector.ReasonUnknown
		}
		var chanErr *ssh.OpenChannelError
		if errors.As(err, &chanErr) {
			// sshd could not connect to the socket (libvirtd not running,
			// wrong path) or forbids streamlocal forwarding.
			return collector.ReasonLibvirtSocketUnavailable
		}
		var lerr libvirt.Error
		if errors.As(err, &lerr) || errors.Is(err, libvirt.ErrUnsupported) {
			return collector.ReasonLibvirtConnectFailed
		}
		// The channel or the SSH connection went away before libvirtd
		// answered.
		return collector.ReasonUnreachable
	}
	return collector.ReasonUnknown
}

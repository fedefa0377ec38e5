package kvm

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/egress-proxies/provider_health_exporter/collector"
)

// Name is the kind's name: its configuration section and provider label.
const Name = "kvm"

// The reasons of a KVM host beyond the shared ones (docs/metrics.md: "Reasons").
const (
	ReasonSSHMaterialInvalid       collector.Reason = "SSHMaterialInvalid"
	ReasonSSHAuthFailed            collector.Reason = "SSHAuthFailed"
	ReasonSSHHandshakeFailed       collector.Reason = "SSHHandshakeFailed"
	ReasonHostKeyUnknown           collector.Reason = "HostKeyUnknown"
	ReasonHostKeyMismatch          collector.Reason = "HostKeyMismatch"
	ReasonLibvirtSocketUnavailable collector.Reason = "LibvirtSocketUnavailable"
	ReasonLibvirtConnectFailed     collector.Reason = "LibvirtConnectFailed"
	ReasonLibvirtConnectionLost    collector.Reason = "LibvirtConnectionLost"
	ReasonPoolMissing              collector.Reason = "PoolMissing"
	ReasonPoolInactive             collector.Reason = "PoolInactive"
	ReasonPoolBuilding             collector.Reason = "PoolBuilding"
	ReasonPoolDegraded             collector.Reason = "PoolDegraded"
	ReasonPoolInaccessible         collector.Reason = "PoolInaccessible"
)

// Reasons is the closed reason set of a KVM host (docs/metrics.md: "Reasons"): every
// one of them is exported on every scrape as a state set. libvirtd
// answering, even with a refusal or a bad pool, is up; everything up to
// its socket is not. A host is dialled over SSH by name: NetworkReasons.
func Reasons() collector.ReasonSet {
	return append(slices.Concat(collector.EngineReasons(), collector.NetworkReasons()),
		collector.ReasonDef{Reason: ReasonSSHMaterialInvalid},
		collector.ReasonDef{Reason: ReasonSSHAuthFailed},
		collector.ReasonDef{Reason: ReasonSSHHandshakeFailed},
		collector.ReasonDef{Reason: ReasonHostKeyUnknown},
		collector.ReasonDef{Reason: ReasonHostKeyMismatch},
		collector.ReasonDef{Reason: ReasonLibvirtSocketUnavailable},
		collector.ReasonDef{Reason: ReasonLibvirtConnectFailed, Up: true},
		collector.ReasonDef{Reason: ReasonLibvirtConnectionLost},
		collector.ReasonDef{Reason: ReasonPoolMissing, Up: true},
		collector.ReasonDef{Reason: ReasonPoolInactive, Up: true},
		collector.ReasonDef{Reason: ReasonPoolBuilding, Up: true},
		collector.ReasonDef{Reason: ReasonPoolDegraded, Up: true},
		collector.ReasonDef{Reason: ReasonPoolInaccessible, Up: true},
		collector.ReasonDef{Reason: ReasonPoolFull, Up: true},
		collector.ReasonDef{Reason: ReasonHostMemoryLow, Up: true},
		collector.ReasonDef{Reason: ReasonHostCPULow, Up: true},
		collector.ReasonDef{Reason: ReasonVolumeMissing, Up: true},
		collector.ReasonDef{Reason: ReasonNetworkMissing, Up: true},
		collector.ReasonDef{Reason: ReasonNetworkInactive, Up: true},
		collector.UnknownReason(),
	)
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
	var flood *floodError
	if errors.As(err, &flood) {
		// The host sent more than any call asked for, while connecting
		// or on its kept connection (drainedChannel).
		return ReasonLibvirtConnectionLost
	}
	var de *dialError
	if !errors.As(err, &de) {
		return collector.ReasonUnknown
	}
	switch de.Stage {
	case stageMaterial:
		return ReasonSSHMaterialInvalid
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
				return ReasonHostKeyUnknown
			}
			return ReasonHostKeyMismatch
		}
		var revoked *knownhosts.RevokedError
		if errors.As(err, &revoked) {
			return ReasonHostKeyMismatch
		}
		if strings.Contains(err.Error(), authFailure) {
			return ReasonSSHAuthFailed
		}
		return ReasonSSHHandshakeFailed
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
			return ReasonLibvirtSocketUnavailable
		}
		var lerr libvirt.Error
		if errors.As(err, &lerr) || errors.Is(err, libvirt.ErrUnsupported) {
			return ReasonLibvirtConnectFailed
		}
		// The channel or the SSH connection went away before libvirtd
		// answered.
		return collector.ReasonUnreachable
	}
	return collector.ReasonUnknown
}

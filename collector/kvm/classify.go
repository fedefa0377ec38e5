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

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Name is the kind's name: its configuration section and provider label.
const Name = "kvm"

// The reasons of a KVM host beyond the shared ones (docs/metrics.md: "Reasons").
const (
	ReasonSSHMaterialInvalid       provider.Reason = "SSHMaterialInvalid"
	ReasonSSHAuthFailed            provider.Reason = "SSHAuthFailed"
	ReasonSSHHandshakeFailed       provider.Reason = "SSHHandshakeFailed"
	ReasonHostKeyUnknown           provider.Reason = "HostKeyUnknown"
	ReasonHostKeyMismatch          provider.Reason = "HostKeyMismatch"
	ReasonLibvirtSocketUnavailable provider.Reason = "LibvirtSocketUnavailable"
	ReasonLibvirtConnectFailed     provider.Reason = "LibvirtConnectFailed"
	ReasonLibvirtConnectionLost    provider.Reason = "LibvirtConnectionLost"
	ReasonPoolMissing              provider.Reason = "PoolMissing"
	ReasonPoolInactive             provider.Reason = "PoolInactive"
	ReasonPoolBuilding             provider.Reason = "PoolBuilding"
	ReasonPoolDegraded             provider.Reason = "PoolDegraded"
	ReasonPoolInaccessible         provider.Reason = "PoolInaccessible"
)

// Reasons is the closed reason set of a KVM host (docs/metrics.md: "Reasons"): every
// one of them is exported on every scrape as a state set. libvirtd
// answering, even with a refusal or a bad pool, is up; everything up to
// its socket is not. A host is dialled over SSH by name: NetworkReasons.
func Reasons() provider.ReasonSet {
	return append(slices.Concat(provider.EngineReasons(), provider.NetworkReasons()),
		provider.ReasonDef{Reason: ReasonSSHMaterialInvalid},
		provider.ReasonDef{Reason: ReasonSSHAuthFailed},
		provider.ReasonDef{Reason: ReasonSSHHandshakeFailed},
		provider.ReasonDef{Reason: ReasonHostKeyUnknown},
		provider.ReasonDef{Reason: ReasonHostKeyMismatch},
		provider.ReasonDef{Reason: ReasonLibvirtSocketUnavailable},
		provider.ReasonDef{Reason: ReasonLibvirtConnectFailed, Up: true},
		provider.ReasonDef{Reason: ReasonLibvirtConnectionLost},
		provider.ReasonDef{Reason: ReasonPoolMissing, Up: true},
		provider.ReasonDef{Reason: ReasonPoolInactive, Up: true},
		provider.ReasonDef{Reason: ReasonPoolBuilding, Up: true},
		provider.ReasonDef{Reason: ReasonPoolDegraded, Up: true},
		provider.ReasonDef{Reason: ReasonPoolInaccessible, Up: true},
		provider.ReasonDef{Reason: ReasonPoolFull, Up: true},
		provider.ReasonDef{Reason: ReasonHostMemoryLow, Up: true},
		provider.ReasonDef{Reason: ReasonHostCPULow, Up: true},
		provider.ReasonDef{Reason: ReasonVolumeMissing, Up: true},
		provider.ReasonDef{Reason: ReasonNetworkMissing, Up: true},
		provider.ReasonDef{Reason: ReasonNetworkInactive, Up: true},
		provider.UnknownReason(),
	)
}

// authFailure is how x/crypto/ssh says the server rejected every key we
// offered; it exposes no error type for it (TestAuthFailureString pins it).
const authFailure = "ssh: unable to authenticate"

// classify derives the reason of a failed dial from its stage and cause
// (docs/metrics.md: "Reasons"; docs/configuration.md: "KVM"). The end of ctx or of dial_timeout wins over
// whatever the error says.
func classify(ctx context.Context, err error) provider.Reason {
	var silent *silentServerError
	if provider.Ended(ctx) || errors.Is(err, &dialTimeoutError{}) || errors.As(err, &silent) {
		return provider.ReasonTimeout
	}
	var flood *floodError
	if errors.As(err, &flood) {
		// The host sent more than any call asked for, while connecting
		// or on its kept connection (drainedChannel).
		return ReasonLibvirtConnectionLost
	}
	var de *dialError
	if !errors.As(err, &de) {
		return provider.ReasonUnknown
	}
	switch de.Stage {
	case stageMaterial:
		return ReasonSSHMaterialInvalid
	case stageTCP:
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The dialer took its deadline from ctx.
			return provider.ReasonTimeout
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return provider.ReasonDNSFailed
		}
		// Refused, reset, no route: every other failure to connect.
		return provider.ReasonUnreachable
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
			return provider.ReasonUnknown
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
		return provider.ReasonUnreachable
	}
	return provider.ReasonUnknown
}

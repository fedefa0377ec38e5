// Package kvm checks KVM hosts: libvirt over SSH, one kept connection per
// host, and the state of the storage pool proxies are created in.
package kvm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

var (
	_ collector.Checker    = (*Checker)(nil)
	_ collector.Closer     = (*Checker)(nil)
	_ collector.Adopter    = (*Checker)(nil)
	_ collector.FactKeeper = (*Checker)(nil)
	_ collector.Backoffer  = (*Checker)(nil)
)

// Checker checks the hosts of one kvm entry.
type Checker struct {
	hosts  []*host
	byName map[string]*host
	// dials runs the dials, at most max_concurrent_dials at once; checks
	// on kept connections do not wait for it.
	dials *dialQueue
	// dialTimeout bounds one dial (dial_timeout), whatever is left of the
	// scrape's budget, so a host that hangs mid-dial gives its slot back
	// early (docs/configuration.md: "KVM").
	dialTimeout time.Duration

	// dialer opens every TCP connection to a host (collector.WithDialer); newClient
	// is the seam where tests put a fake libvirt behind the SSH channel.
	dialer    *net.Dialer
	newClient func(net.Conn) libvirtClient
	// material is the entry's parsed SSH material, shared by its hosts.
	material *material

	// logger is New's, for what happens outside a check (Close).
	logger *slog.Logger

	// ctx bounds the dials, which outlive the checks that queued them;
	// Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
}

// host is one configured host and its kept connection.
type host struct {
	name string
	pool string
	// mins are the host's headroom minimums (0: not set).
	mins Minimums
	set  settings
	mu   sync.Mutex
	sess *session
	// job is the dial of this host queued or running, so concurrent
	// checks of one host never make two connections.
	job      *dialJob
	connects uint64
	version  string // last known libvirt version, kept across redials
	// failedDials counts the dials that failed in a row; notBefore is
	// when the next one may start (see backoffDelay).
	failedDials int
	notBefore   time.Time
	// facts are those of the last verdict, handed out again while a check
	// finds nothing new, so that their metrics are not collected again
	// (collector.Facts).
	facts *Facts
}

// Backoff of a host whose dials keep failing (docs/configuration.md: "KVM"): one failed
// dial is retried at the next scrape, since most failures are brief; from
// the second in a row on, the host waits backoffBase, doubling up to
// backoffMax. A host that hangs mid-dial would otherwise take a dial slot
// for dial_timeout at every scrape, and a hundred of them every slot.
const (
	backoffBase = 10 * time.Second
	backoffMax  = 2 * time.Minute
)

// backoffDelay is the wait after failed dials in a row.
func backoffDelay(failed int) time.Duration {
	if failed < 2 {
		return 0
	}
	d := backoffBase
	for range failed - 2 {
		d *= 2
		if d >= backoffMax {
			return backoffMax
		}
	}
	return d
}

// NotBefore is when the next check of target may dial (collector.Backoffer);
// until then the engine serves its last verdict.
func (c *Checker) NotBefore(target string) time.Time {
	h := c.byName[target]
	if h == nil {
		return time.Time{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.notBefore
}

// New makes a checker for cfg. It does no network I/O.
func New(cfg *config.KVM, logger *slog.Logger, opts ...collector.Option) (*Checker, error) {
	if cfg == nil {
		return nil, errors.New("kvm: nil config")
	}
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("no hosts")
	}
	dials := cfg.MaxConcurrentDials
	if dials < 1 {
		dials = config.DefaultMaxConcurrentDials
	}
	dialTimeout := time.Duration(cfg.DialTimeout)
	if dialTimeout <= 0 {
		dialTimeout = time.Duration(config.DefaultDialTimeout)
	}
	c := &Checker{
		byName:      make(map[string]*host, len(cfg.Hosts)),
		dialTimeout: dialTimeout,
		dialer:      collector.Apply(opts).Dialer(&net.Dialer{}),
		newClient:   newLibvirtClient,
		material:    newMaterial(),
		logger:      logger,
	}
	c.dials = newDialQueue(dials, c.runDial)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for _, h := range cfg.Hosts {
		if _, dup := c.byName[h.Name]; dup {
			return nil, fmt.Errorf("duplicate host name %q", h.Name)
		}
		hh := &host{
			name: h.Name,
			pool: h.Pool,
			mins: Minimums{PoolAvailable: h.MinPoolAvailableBytes, FreeMemory: h.MinFreeMemoryBytes},
			set:  hostSettings(cfg, h),
		}
		c.hosts = append(c.hosts, hh)
		c.byName[h.Name] = hh
	}
	if cfg.InsecureIgnoreHostKey {
		// The logger main hands in already carries provider and name.
		logger.Warn("insecure_ignore_host_key is set: SSH host keys are not verified, a man in the middle can impersonate these hosts")
	}
	return c, nil
}

// hostSettings are what a host's connection depends on.
func hostSettings(cfg *config.KVM, h *config.KVMHost) settings {
	return settings{
		address:        h.Address,
		user:           h.User,
		keyFile:        h.PrivateKeyFile,
		passphraseFile: cfg.PassphraseFile,
		knownHostsFile: cfg.KnownHostsFile,
		insecure:       cfg.InsecureIgnoreHostKey,
		socket:         cfg.LibvirtSocket,
		uri:            cfg.LibvirtURI,
	}
}

// CheckFiles reads the SSH material of every host the way a check does,
// without dialing, and returns one error per problem, prefixed with the
// field it is about: what --config.check warns about.
func CheckFiles(cfg *config.KVM) []error {
	var errs []error
	keys := &signerCache{}
	seenKey := map[string]bool{}
	for i, h := range cfg.Hosts {
		set := hostSettings(cfg, h)
		if !seenKey[set.keyFile] {
			seenKey[set.keyFile] = true
			if _, err := loadSigner(set, keys); err != nil {
				errs = append(errs, fmt.Errorf("private_key_file: %w", err))
			}
		}
		if i == 0 { // one known_hosts file for the whole entry
			if _, err := hostKeyCallback(set); err != nil {
				errs = append(errs, fmt.Errorf("known_hosts_file: %w", err))
			}
		}
	}
	return errs
}

// Targets lists the hosts in configuration order.
func (c *Checker) Targets() []collector.Target {
	out := make([]collector.Target, len(c.hosts))
	for i, h := range c.hosts {
		out[i] = collector.Target{Name: h.name, Address: h.set.address}
	}
	return out
}

// Check checks one host: it reuses the kept connection or dials a new one,
// then asks for the pool.
func (c *Checker) Check(ctx context.Context, logger *slog.Logger, target string) collector.Verdict {
	h := c.byName[target]
	if h == nil {
		return collector.Verdict{Reason: collector.ReasonUnknown, Message: fmt.Sprintf("unknown kvm host %q", target)}
	}
	r := result{pool: h.pool}
	if collector.Ended(ctx) {
		// Binding a call to a context that is already over would close
		// the kept connection for nothing.
		r.reason, r.err = collector.ReasonTimeout, fmt.Errorf("no time left for the check: %w", context.Cause(ctx))
		return h.verdict(logger, r)
	}
	s, kept, transient, err := c.session(ctx, logger, h)
	if err != nil {
		r.reason, r.err = classify(ctx, err), err
		return h.verdict(logger, r)
	}
	if transient {
		defer s.goodbye(logger)
	}
	r.reason, r.state, r.info, r.err = c.checkPool(ctx, logger, h, s, kept)
	c.checkHeadroom(ctx, logger, h, s, &r)
	return h.verdict(logger, r)
}

// checkHeadroom compares a running pool's available bytes and, only when
// min_free_memory is set (one more RPC), the host's free memory with the
// host's minimums (docs/configuration.md: "KVM").
func (c *Checker) checkHeadroom(ctx context.Context, logger *slog.Logger, h *host, s *session, r *result) {
	if r.reason != collector.ReasonReady {
		return
	}
	if h.mins.FreeMemory > 0 {
		free, reason, err := c.checkFreeMemory(ctx, logger, h, s)
		if err != nil {
			r.reason, r.err = reason, err
			return
		}
		r.free, r.freeKnown = free, true
	}
	r.reason, r.message = headroomVerdict(r.reason, h.pool, r.info.available, h.mins, r.free)
}

type poolInfo struct {
	capacity, allocation, available uint64
}

// checkPool makes the only calls a check on a kept connection makes. A pool
// verdict keeps the connection; a transport failure or the end of ctx drops
// it.
func (c *Checker) checkPool(ctx context.Context, logger *slog.Logger, h *host, s *session, kept bool) (collector.Reason, string, poolInfo, error) {
	lv := loggedClient{next: s.lv, logger: logger}
	var (
		state uint8
		info  poolInfo
	)
	err := s.bound(ctx, func() error {
		p, err := lv.StoragePoolLookupByName(h.pool)
		if err != nil {
			return fmt.Errorf("look up pool %q: %w", h.pool, err)
		}
		state, info.capacity, info.allocation, info.available, err = lv.StoragePoolGetInfo(p)
		if err != nil {
			return fmt.Errorf("get info of pool %q: %w", h.pool, err)
		}
		return nil
	})
	if err != nil {
		if collector.Ended(ctx) {
			h.drop(s)
			return collector.ReasonTimeout, "", info, err
		}
		var lerr libvirt.Error
		if errors.As(err, &lerr) || errors.Is(err, libvirt.ErrUnsupported) {
			// libvirtd answered: the connection is fine.
			if lerr.Code == uint32(libvirt.ErrNoStoragePool) {
				return ReasonPoolMissing, "", info, err
			}
			return collector.ReasonUnknown, "", info, err
		}
		h.drop(s)
		if kept {
			err = fmt.Errorf("kept connection lost: %w", err)
		}
		return ReasonLibvirtConnectionLost, "", info, err
	}
	word := poolStateWord(state)
	switch libvirt.StoragePoolState(state) {
	case libvirt.StoragePoolRunning:
		return collector.ReasonReady, word, info, nil
	case libvirt.StoragePoolInactive:
		return ReasonPoolInactive, word, info, nil
	case libvirt.StoragePoolBuilding:
		return ReasonPoolBuilding, word, info, nil
	case libvirt.StoragePoolDegraded:
		return ReasonPoolDegraded, word, info, nil
	case libvirt.StoragePoolInaccessible:
		return ReasonPoolInaccessible, word, info, nil
	}
	return collector.ReasonUnknown, "", info, fmt.Errorf("pool %q has state %d, which this exporter does not know", h.pool, state)
}

type result struct {
	reason collector.Reason
	pool   string
	state  string
	info   poolInfo
	// free is the host's free memory when freeKnown (min_free_memory set
	// and read); message, when not empty, is a headroom verdict's.
	free      uint64
	freeKnown bool
	message   string
	err       error
}

func (h *host) verdict(logger *slog.Logger, r result) collector.Verdict {
	facts := &Facts{Pool: r.pool, PoolState: r.state, Mins: h.mins, FreeMemoryKnown: r.freeKnown, FreeMemoryBytes: r.free}
	if r.state != "" {
		facts.CapacityBytes = r.info.capacity
		facts.AllocationBytes = r.info.allocation
		facts.AvailableBytes = r.info.available
	}
	h.mu.Lock()
	facts.User, facts.LibvirtVersion, facts.Connects = h.set.user, h.version, h.connects
	if h.facts != nil && *h.facts == *facts {
		facts = h.facts
	}
	h.facts = facts
	h.mu.Unlock()
	v := collector.Verdict{Reason: r.reason, Facts: facts}
	switch {
	case r.err != nil:
		v.Message = r.err.Error()
		logger.Debug("check failed", "reason", r.reason, "err", r.err)
	case r.message != "":
		v.Message = r.message
	case r.reason == collector.ReasonReady:
		v.Message = fmt.Sprintf("pool %q is running", r.pool)
	default:
		v.Message = fmt.Sprintf("pool %q is %s", r.pool, r.state)
	}
	return v
}

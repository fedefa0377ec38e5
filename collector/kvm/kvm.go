// Package kvm checks KVM hosts: libvirt over SSH, one kept connection per
// host, and the state of the storage pool proxies are created in.
package kvm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

var (
	_ provider.Checker    = (*Checker)(nil)
	_ provider.Closer     = (*Checker)(nil)
	_ provider.Adopter    = (*Checker)(nil)
	_ provider.FactKeeper = (*Checker)(nil)
	_ provider.Backoffer  = (*Checker)(nil)
)

// Checker checks the hosts of one kvm entry.
type Checker struct {
	// specs are the configured hosts, in configuration order, and order
	// their indexes sorted by name. A host's state (host) is made when a
	// check, or an adopted connection, first needs it: a fleet of 100,000
	// hosts costs some 50 bytes a host until it is checked, not the 400 of
	// a host's state and a map entry (docs/scaling.md: "Large
	// configurations").
	specs []hostSpec
	order []int32
	live  []atomic.Pointer[host]
	// base are the connection settings every host of the entry shares.
	base settings
	// dials runs the dials, as many at once as its window allows and at
	// most max_concurrent_dials; checks on kept connections do not wait
	// for it.
	dials *dialQueue
	// dialTimeout bounds one dial (dial_timeout), whatever is left of the
	// scrape's budget, so a host that hangs mid-dial gives its slot back
	// early (docs/configuration.md: "KVM").
	dialTimeout time.Duration
	// lateGrace is how long a check's libvirt call may go on past the
	// check's deadline before its connection is closed (lateAnswerGrace).
	lateGrace time.Duration

	// dialer opens every TCP connection to a host (provider.WithDialer); newClient
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
	// (provider.Facts).
	facts *Facts
	// volume and network are the host's placement keys ("": not checked).
	volume, network string
	// domain is the host's configured failure domain ("": none, the host
	// is its own), proxyVMName the glob of its proxies' domain names ("":
	// not counted); with either the verdict carries the host's domain.
	domain, proxyVMName string
	// ready is the message of a Ready verdict for its pool.
	ready struct{ pool, msg string }
	// lastDrop is why the host's last connection was dropped, until a
	// connection outlives a check: a host that loses every connection the
	// same way is logged at info once, then at debug.
	lastDrop string
	// fault is why the peer closed the kept connection between checks
	// (drainedChannel), until the next check reports it.
	fault error
}

// keep makes s the kept session of h, called with h.mu held: a session its
// peer floods between checks is let go at once (x/crypto/ssh holds what
// it had queued until then) and its fault kept for the next check.
func (h *host) keep(s *session) {
	h.sess = s
	s.watch(func(err error) {
		h.mu.Lock()
		if h.sess == s {
			h.sess, h.fault = nil, err
		}
		h.mu.Unlock()
	})
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

// NotBefore is when the next check of target may dial (provider.Backoffer);
// until then the engine serves its last verdict.
func (c *Checker) NotBefore(target string) time.Time {
	h, _ := c.peek(target)
	if h == nil {
		return time.Time{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.notBefore
}

// hostSpec is one configured host as the checker keeps it until it is
// checked: its name and address, and its own settings, which the hosts
// that share them share.
type hostSpec struct {
	name, address string
	own           *hostOwn
}

// hostOwn are the settings of a host that may differ from another's of
// the same entry.
type hostOwn struct {
	user, pool, keyFile, volume, network string
	// domain is the host's configured failure domain ("": none), in
	// hostOwn rather than in every hostSpec: the hosts of a rack share
	// it. proxyVMName is the glob of the proxies' domain names ("": not
	// counted).
	domain, proxyVMName string
	mins                Minimums
}

// find is the index of the host named name, or -1.
func (c *Checker) find(name string) int {
	i, ok := slices.BinarySearchFunc(c.order, name, func(j int32, name string) int {
		return strings.Compare(c.specs[j].name, name)
	})
	if !ok {
		return -1
	}
	return int(c.order[i])
}

// lookup is the state of the host named target, made if it was not yet;
// nil for a name the entry does not have.
func (c *Checker) lookup(target string) *host {
	i := c.find(target)
	if i < 0 {
		return nil
	}
	return c.hostAt(i)
}

// peek is the state of the host named target if it was made, and its
// spec (nil for a name the entry does not have).
func (c *Checker) peek(target string) (*host, *hostSpec) {
	i := c.find(target)
	if i < 0 {
		return nil, nil
	}
	return c.live[i].Load(), &c.specs[i]
}

// hostAt is the state of the i-th host, made if it was not yet.
func (c *Checker) hostAt(i int) *host {
	if h := c.live[i].Load(); h != nil {
		return h
	}
	sp := &c.specs[i]
	set := c.base
	set.address, set.user, set.keyFile = sp.address, sp.own.user, sp.own.keyFile
	h := &host{name: sp.name, pool: sp.own.pool, mins: sp.own.mins, volume: sp.own.volume, network: sp.own.network, set: set,
		domain: sp.own.domain, proxyVMName: sp.own.proxyVMName}
	if c.live[i].CompareAndSwap(nil, h) {
		return h
	}
	return c.live[i].Load()
}

// liveHosts are the hosts whose state was made, in configuration order.
func (c *Checker) liveHosts() []*host {
	var out []*host
	for i := range c.live {
		if h := c.live[i].Load(); h != nil {
			out = append(out, h)
		}
	}
	return out
}

// New makes a checker for cfg. It does no network I/O.
func New(cfg *Entry, logger *slog.Logger, opts ...provider.Option) (*Checker, error) {
	if cfg == nil {
		return nil, errors.New("kvm: nil config")
	}
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("no hosts")
	}
	dials := cfg.MaxConcurrentDials
	if dials < 1 {
		dials = DefaultMaxConcurrentDials
	}
	dialTimeout := time.Duration(cfg.DialTimeout)
	if dialTimeout <= 0 {
		dialTimeout = time.Duration(DefaultDialTimeout)
	}
	c := &Checker{
		base: settings{passphraseFile: cfg.PassphraseFile, knownHostsFile: cfg.KnownHostsFile, insecure: cfg.InsecureIgnoreHostKey,
			socket: cfg.LibvirtSocket, uri: cfg.LibvirtURI},
		dialTimeout: dialTimeout,
		lateGrace:   lateAnswerGrace,
		dialer:      provider.Apply(opts).Dialer(&net.Dialer{}),
		newClient:   newLibvirtClient,
		material:    newMaterial(),
		logger:      logger,
	}
	if err := c.setHosts(cfg.Hosts); err != nil {
		return nil, err
	}
	c.dials = newDialQueue(dials, dialTimeout, c.runDial)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if cfg.InsecureIgnoreHostKey {
		// The logger main hands in already carries provider and name.
		logger.Warn("insecure_ignore_host_key is set: SSH host keys are not verified, a man in the middle can impersonate these hosts")
	}
	return c, nil
}

// setHosts keeps the specs of hosts, the hosts of equal settings sharing
// one hostOwn, and refuses a name used twice.
func (c *Checker) setHosts(hosts []*Host) error {
	c.specs = make([]hostSpec, len(hosts))
	c.order = make([]int32, len(hosts))
	c.live = make([]atomic.Pointer[host], len(hosts))
	shared := map[hostOwn]*hostOwn{}
	for i, h := range hosts {
		own := hostOwn{user: h.User, pool: h.Pool, keyFile: h.PrivateKeyFile, volume: h.Volume, network: h.Network, domain: h.Domain, proxyVMName: h.ProxyVMName,
			mins: Minimums{PoolAvailable: h.MinPoolAvailableBytes, FreeMemory: h.MinFreeMemoryBytes, Promised: h.Promised}}
		p := shared[own]
		if p == nil {
			p = &own
			shared[own] = p
		}
		c.specs[i] = hostSpec{name: h.Name, address: h.Address, own: p}
		c.order[i] = int32(i)
	}
	slices.SortFunc(c.order, func(a, b int32) int { return strings.Compare(c.specs[a].name, c.specs[b].name) })
	for i := 1; i < len(c.order); i++ {
		if name := c.specs[c.order[i]].name; name == c.specs[c.order[i-1]].name {
			return fmt.Errorf("duplicate host name %q", name)
		}
	}
	return nil
}

// hostSettings are what a host's connection depends on.
func hostSettings(cfg *Entry, h *Host) settings {
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
func CheckFiles(cfg *Entry) []error {
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
			if _, err := loadKnownHosts(set); err != nil {
				errs = append(errs, fmt.Errorf("known_hosts_file: %w", err))
			}
		}
	}
	return errs
}

// Targets lists the hosts in configuration order.
func (c *Checker) Targets() []provider.Target {
	out := make([]provider.Target, len(c.specs))
	for i, sp := range c.specs {
		out[i] = provider.Target{Name: sp.name, Address: sp.address}
	}
	return out
}

// Check checks one host: it reuses the kept connection or dials a new one,
// then asks for the pool.
func (c *Checker) Check(ctx context.Context, logger *slog.Logger, target string) provider.Verdict {
	h := c.lookup(target)
	if h == nil {
		return provider.Verdict{Reason: provider.ReasonUnknown, Message: fmt.Sprintf("unknown kvm host %q", target)}
	}
	r := result{pool: h.pool}
	if provider.Ended(ctx) {
		// Binding a call to a context that is already over would close
		// the kept connection for nothing.
		r.reason, r.err = provider.ReasonTimeout, fmt.Errorf("no time left for the check: %w", endedCause(ctx))
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
	if provider.Ended(ctx) {
		// The dial ended as the deadline came: a call now would have no
		// time to answer and would cost the new connection.
		r.reason, r.err = provider.ReasonTimeout, fmt.Errorf("connected, but no time was left for the check: %w", endedCause(ctx))
		return h.verdict(logger, r)
	}
	r.reason, r.state, r.info, r.handle, r.err = c.checkPool(ctx, logger, h, s, kept)
	c.checkHeadroom(ctx, logger, h, s, &r)
	c.countProxies(ctx, logger, h, s, &r)
	if kept && !s.isDead() {
		// The connection outlived a check: a later drop is news.
		h.mu.Lock()
		h.lastDrop = ""
		h.mu.Unlock()
	}
	return h.verdict(logger, r)
}

// checkHeadroom compares a running pool's available bytes and, only when
// min_free_memory is set (one more RPC), the host's free memory with the
// host's minimums, and what is promised of the pool, the memory and the
// vCPUs where the promised-resource keys are set (readPromised), and
// checks the volume and network when they are set (one RPC each), in the
// order of docs/configuration.md ("KVM"): PoolFull, VolumeMissing,
// NetworkMissing, NetworkInactive, HostMemoryLow, HostCPULow. What an
// earlier one finds is the verdict, and the later ones are not asked.
func (c *Checker) checkHeadroom(ctx context.Context, logger *slog.Logger, h *host, s *session, r *result) {
	if r.reason != provider.ReasonReady {
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
	if h.mins.promised().counts() {
		rd, reason, err := c.readPromised(ctx, logger, h, s, r.handle)
		if err != nil {
			r.reason, r.err = reason, err
			return
		}
		r.promised = rd
	}
	r.reason, r.message = headroomVerdict(r.reason, h.pool, r.info.available, Minimums{PoolAvailable: h.mins.PoolAvailable}, 0)
	if r.reason != provider.ReasonReady {
		return
	}
	if f := diskConstraint(h.mins, h.pool, r.info.capacity, &r.promised); f.short() {
		r.reason, r.message = ReasonPoolFull, shortMessage(f, formatBytes(h.mins.PoolAvailable))
		return
	}
	if c.checkPlacement(ctx, logger, h, s, r); r.reason != provider.ReasonReady {
		return
	}
	if r.reason, r.message = headroomVerdict(r.reason, h.pool, r.info.available, h.mins, r.free); r.reason != provider.ReasonReady {
		return
	}
	if f := memoryConstraint(h.mins, &r.promised); f.short() {
		r.reason, r.message = ReasonHostMemoryLow, shortMessage(f, formatBytes(h.mins.FreeMemory))
		return
	}
	if f := vcpuConstraint(h.mins.promised(), &r.promised); f.short() {
		r.reason, r.message = ReasonHostCPULow, shortMessage(f, fmt.Sprintf("%d vCPUs", h.mins.promised().VCPUs))
	}
}

type poolInfo struct {
	capacity, allocation, available uint64
}

// checkPool reads the pool's state and sizes: StoragePoolGetInfo on the
// pool handle the connection keeps, the one call of a steady check. The
// handle is looked up when the connection has none for this pool (a new
// connection, a reload that changed the pool) and again, once, when libvirt
// says the pool it names is gone: undefined, or defined again under the
// same name with a new UUID. Only when that lookup fails too is the verdict
// PoolMissing. A pool verdict keeps the connection; a transport failure, or
// a call still unanswered well past the deadline, drops it.
func (c *Checker) checkPool(ctx context.Context, logger *slog.Logger, h *host, s *session, kept bool) (provider.Reason, string, poolInfo, libvirt.StoragePool, error) {
	lv := loggedClient{next: s.lv, logger: logger}
	var (
		state uint8
		info  poolInfo
		pool  libvirt.StoragePool
	)
	err := s.call(ctx, func() error {
		p, handle := s.poolHandle(h.pool)
		var err error
		if !handle {
			if p, err = lv.StoragePoolLookupByName(h.pool); err != nil {
				return fmt.Errorf("look up pool %q: %w", h.pool, err)
			}
		}
		state, info.capacity, info.allocation, info.available, err = lv.StoragePoolGetInfo(p)
		if handle && libvirtCode(err, libvirt.ErrNoStoragePool) {
			logger.Debug("the kept pool handle is stale, looking the pool up again", "pool", h.pool, "err", err)
			s.forgetPool()
			if p, err = lv.StoragePoolLookupByName(h.pool); err != nil {
				return fmt.Errorf("look up pool %q: %w", h.pool, err)
			}
			state, info.capacity, info.allocation, info.available, err = lv.StoragePoolGetInfo(p)
		}
		if err != nil {
			return fmt.Errorf("get info of pool %q: %w", h.pool, err)
		}
		s.keepPool(p)
		pool = p
		return nil
	})
	if err != nil {
		if !provider.Ended(ctx) && libvirtCode(err, libvirt.ErrNoStoragePool) {
			return ReasonPoolMissing, "", info, pool, err
		}
		if kept && !provider.Ended(ctx) && !libvirtError(err) {
			err = fmt.Errorf("kept connection lost: %w", err)
		}
		reason, err := h.callFailed(ctx, logger, s, err)
		return reason, "", info, pool, err
	}
	word := poolStateWord(state)
	switch libvirt.StoragePoolState(state) {
	case libvirt.StoragePoolRunning:
		return provider.ReasonReady, word, info, pool, nil
	case libvirt.StoragePoolInactive:
		return ReasonPoolInactive, word, info, pool, nil
	case libvirt.StoragePoolBuilding:
		return ReasonPoolBuilding, word, info, pool, nil
	case libvirt.StoragePoolDegraded:
		return ReasonPoolDegraded, word, info, pool, nil
	case libvirt.StoragePoolInaccessible:
		return ReasonPoolInaccessible, word, info, pool, nil
	}
	return provider.ReasonUnknown, "", info, pool, fmt.Errorf("pool %q has state %d, which this exporter does not know", h.pool, state)
}

// libvirtError tells whether libvirtd answered err: the connection is fine.
func libvirtError(err error) bool {
	var lerr libvirt.Error
	return errors.As(err, &lerr) || errors.Is(err, libvirt.ErrUnsupported)
}

type result struct {
	reason provider.Reason
	pool   string
	state  string
	info   poolInfo
	// handle is the pool's handle, for the volume lookup.
	handle libvirt.StoragePool
	// free is the host's free memory when freeKnown (min_free_memory set
	// and read); message, when not empty, is a headroom verdict's.
	free      uint64
	freeKnown bool
	// promised is what the promised-resource keys read.
	promised promisedReading
	// proxies are the defined domains proxy_vm_name matches, when
	// proxiesKnown.
	proxies      int64
	proxiesKnown bool
	message      string
	err          error
}

func (h *host) verdict(logger *slog.Logger, r result) provider.Verdict {
	// Built on the stack and compared with the last ones: a steady check
	// finds what the one before found and hands out the same Facts.
	f := Facts{Pool: r.pool, PoolState: r.state, Mins: h.mins, FreeMemoryKnown: r.freeKnown, FreeMemoryBytes: r.free,
		Volume: h.volume, Network: h.network,
		HostCPUs: r.promised.node.cpus, HostMemoryBytes: kibToBytes(r.promised.node.memoryKiB), HostKnown: r.promised.nodeKnown,
		DomainsVCPUs: r.promised.domainVCPUs, DomainsMemory: r.promised.domainMemory, DomainsKnown: r.promised.domainsKnown,
		VolumesCapacity: r.promised.volumes, VolumesKnown: r.promised.volumesKnown}
	if r.state != "" {
		f.CapacityBytes = r.info.capacity
		f.AllocationBytes = r.info.allocation
		f.AvailableBytes = r.info.available
	}
	h.mu.Lock()
	f.User, f.LibvirtVersion, f.Connects = h.set.user, h.version, h.connects
	if h.facts == nil || *h.facts != f {
		changed := f // f itself stays on the stack
		h.facts = &changed
	}
	facts := h.facts
	h.mu.Unlock()
	v := provider.Verdict{Reason: r.reason, Facts: facts, Capacity: hostCapacity(&r, h.mins)}
	v.Domains = h.domains(v.Capacity, &r)
	switch {
	case r.err != nil:
		// libvirt's error text is the daemon's, up to a reply's 64 KiB.
		v.Message = provider.BoundString(r.err.Error())
		logger.Debug("check failed", "reason", r.reason, "err", r.err)
	case r.message != "":
		v.Message = r.message
	case r.reason == provider.ReasonReady:
		v.Message = h.readyMessage(r.pool)
	default:
		v.Message = fmt.Sprintf("pool %q is %s", r.pool, r.state)
	}
	return v
}

// readyMessage is the message of a Ready verdict, made once per pool name
// rather than at every check.
func (h *host) readyMessage(pool string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ready.pool != pool || h.ready.msg == "" {
		h.ready.pool, h.ready.msg = pool, fmt.Sprintf("pool %q is running", pool)
	}
	return h.ready.msg
}

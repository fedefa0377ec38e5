package kvm

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Fault is how FakeLibvirtd breaks the reply to one procedure.
type Fault int32

const (
	FaultNone           Fault = iota
	FaultZeroLength           // a length field of 0
	FaultHugeLength           // a length field of 0xfffffff0
	FaultTruncated            // a frame cut off in its payload, then hang up
	FaultWrongProgram         // another RPC program's number
	FaultWrongProcedure       // a reply naming an event procedure, not the call's
	FaultGarbageXDR           // a payload that does not decode as the reply
)

// FaultNames name the faults in subtests.
var FaultNames = map[Fault]string{
	FaultZeroLength: "zero length", FaultHugeLength: "huge length", FaultTruncated: "truncated frame",
	FaultWrongProgram: "wrong program", FaultWrongProcedure: "wrong procedure", FaultGarbageXDR: "garbage XDR",
}

// Procedures a check calls, for tests outside the package.
const (
	ProcAuthList                = procAuthList
	ProcStoragePoolLookupByName = procStoragePoolLookupByName
	ProcStoragePoolGetInfo      = procStoragePoolGetInfo
)

// FakeLibvirtd is a libvirt peer on a unix socket that speaks libvirt's RPC
// framing: it answers the calls a check makes as libvirtd does, and breaks
// the reply to one procedure on demand. It plays the hostile or broken
// host a real libvirtd cannot be made to be, behind the in-process SSH
// server or a real sshd.
type FakeLibvirtd struct {
	srv *unixServer

	fault     atomic.Int32
	faultProc atomic.Uint32
	faults    atomic.Int64 // broken replies sent
	// latency delays every reply, as a host across a WAN does.
	latency atomic.Int64

	mu    sync.Mutex
	calls map[uint32]int
	// vols, when set (SetVolumes), is the pool's volumes in place of the
	// FakeVolumes of FakeVolumeCapacity each.
	vols *fakeVolumes
}

// FakeVolume is a volume of the fake's pool: its name (its key is
// "/p/" + name) and its capacity; Gone answers StorageVolGetInfo on it with
// VIR_ERR_NO_STORAGE_VOL, as for a volume deleted between a check's list
// and its info.
type FakeVolume struct {
	Name     string
	Capacity uint64
	Gone     bool
}

// fakeVolumes is the pool set by SetVolumes: the list reply, encoded once
// (a pool of libvirt's maximum of 16,384 volumes is the benchmark's), and
// each volume by name.
type fakeVolumes struct {
	list   []byte
	byName map[string]FakeVolume
}

// SetVolumes makes the pool hold vols from now on.
func (f *FakeLibvirtd) SetVolumes(vols []FakeVolume) {
	fv := &fakeVolumes{byName: make(map[string]FakeVolume, len(vols))}
	w := xdrWriter{}
	w.u32(uint32(len(vols)))
	for _, v := range vols {
		w.str("default")
		w.str(v.Name)
		w.str("/p/" + v.Name)
		fv.byName[v.Name] = v
	}
	w.u32(uint32(len(vols)))
	fv.list = w.b
	f.mu.Lock()
	f.vols = fv
	f.mu.Unlock()
}

// AllCalls counts the calls received, of every procedure.
func (f *FakeLibvirtd) AllCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
}

// volumeAnswer is the answer to a volume call on the pool SetVolumes set,
// ok false for another call or while none is set.
func (f *FakeLibvirtd) volumeAnswer(proc uint32, body []byte) (status uint32, payload []byte, ok bool) {
	f.mu.Lock()
	fv := f.vols
	f.mu.Unlock()
	if fv == nil {
		return 0, nil, false
	}
	switch proc {
	case procStoragePoolListAllVolumes:
		return statusOK, fv.list, true
	case procStorageVolGetInfo:
		// The call is the volume: its pool, name and key.
		name := ""
		if off := xdrStringEnd(body); off <= len(body) {
			name = firstString(body[off:])
		}
		v, found := fv.byName[name]
		if !found || v.Gone {
			return statusError, errorPayload(errNoStorageVol, "Storage volume not found: no storage vol with matching key '/p/"+name+"'"), true
		}
		w := xdrWriter{}
		w.u32(0) // file
		w.u64(v.Capacity, 1<<20)
		return statusOK, w.b, true
	}
	return 0, nil, false
}

// xdrStringEnd is where the first XDR string of b ends, padding included;
// past len(b) when b is too short.
func xdrStringEnd(b []byte) int {
	if len(b) < 4 {
		return len(b) + 1
	}
	n := int(binary.BigEndian.Uint32(b))
	if n > len(b) {
		return len(b) + 1
	}
	return 4 + n + (4-n%4)%4
}

// NewFakeLibvirtd listens on a socket in a new directory that every user can
// reach, so sshd's forwarding, which runs as the login user, can connect.
func NewFakeLibvirtd(t testing.TB) *FakeLibvirtd {
	t.Helper()
	f := &FakeLibvirtd{calls: map[uint32]int{}}
	f.srv = listenUnix(t, 0o777, f.handle)
	return f
}

// Path is the socket's path: the libvirt_socket of a host.
func (f *FakeLibvirtd) Path() string { return f.srv.path }

// SetFault breaks every reply to proc from now on (FaultNone: none).
func (f *FakeLibvirtd) SetFault(fault Fault, proc uint32) {
	f.faultProc.Store(proc)
	f.fault.Store(int32(fault))
}

// SetLatency delays every reply from now on by d.
func (f *FakeLibvirtd) SetLatency(d time.Duration) { f.latency.Store(int64(d)) }

// Faults counts the broken replies sent.
func (f *FakeLibvirtd) Faults() int64 { return f.faults.Load() }

// Calls counts the calls of proc received.
func (f *FakeLibvirtd) Calls(proc uint32) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[proc]
}

// Conns is the number of connections open now.
func (f *FakeLibvirtd) Conns() int { return f.srv.open() }

// Close stops listening and hangs up on every connection.
func (f *FakeLibvirtd) Close() { f.srv.close() }

// handle answers calls until the client hangs up. After a broken reply it
// reads on without answering, so it is the client that must end the
// connection.
func (f *FakeLibvirtd) handle(c net.Conn) {
	for {
		var hb [minFrameLen]byte
		if _, err := io.ReadFull(c, hb[:]); err != nil {
			return
		}
		h := parseHeader(hb[:])
		if h.length < minFrameLen || h.length > maxReplyLen {
			return
		}
		body := make([]byte, int(h.length)-minFrameLen)
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		f.mu.Lock()
		f.calls[h.procedure]++
		f.mu.Unlock()
		if d := time.Duration(f.latency.Load()); d > 0 {
			time.Sleep(d)
		}
		fault := Fault(f.fault.Load())
		if fault != FaultNone && f.faultProc.Load() == h.procedure {
			f.faults.Add(1)
			if _, err := c.Write(BrokenReply(fault, h.procedure, h.serial)); err != nil || fault == FaultTruncated {
				return
			}
			_, _ = io.Copy(io.Discard, c)
			return
		}
		name := firstString(body)
		if name == DropPool && h.procedure == procStoragePoolGetInfo {
			return // the connection drops in the middle of the check
		}
		status, payload, ok := f.volumeAnswer(h.procedure, body)
		if !ok {
			status, payload = answerTo(h.procedure, name, body)
		}
		if _, err := c.Write(replyFrame(remoteProgram, h.procedure, h.serial, status, payload)); err != nil {
			return
		}
	}
}

// DropPool is a pool the fake finds but hangs up on when asked for its
// info: a host whose connection drops in the middle of every check.
const DropPool = "drops-mid-check"

// MissingPool is the one pool the fake does not have (libvirt error 49);
// it finds every other name, so tests can name pools as they like.
const MissingPool = "missing"

// FakeFreeMemory is the host free memory the fake reports.
const FakeFreeMemory = 3 << 30

// What the fake answers the promised-resource calls: a host of 8 CPUs and
// 32 GiB, with FakeDomains domains of 2 vCPUs and 4 GiB each, and a pool
// of FakeVolumes volumes of 20 GiB each.
const (
	FakeHostCPUs        = 8
	FakeHostMemoryKiB   = 32 << 20
	FakeDomains         = 4
	FakeDomainVCPUs     = 2
	FakeDomainMemoryKiB = 4 << 20
	FakeVolumes         = 3
	FakeVolumeCapacity  = 20 << 30
)

// MissingVolume and MissingNetwork are the volume and network the fake
// does not have (libvirt errors 50 and 43), InactiveNetwork the one it has
// defined but not started; it has every other name.
const (
	MissingVolume   = "missing.qcow2"
	MissingNetwork  = "missing-net"
	InactiveNetwork = "inactive-net"
)

// libvirt's VIR_ERR_NO_STORAGE_POOL, VIR_ERR_NO_STORAGE_VOL and
// VIR_ERR_NO_NETWORK.
const (
	errNoStoragePool = 49
	errNoStorageVol  = 50
	errNoNetwork     = 43
)

// firstString is the first XDR string of a call's payload: the pool a pool
// call names, the network a network call names. "" for a payload too short.
func firstString(body []byte) string {
	if len(body) < 4 {
		return ""
	}
	n := binary.BigEndian.Uint32(body)
	if uint64(n) > uint64(len(body)-4) {
		return ""
	}
	return string(body[4 : 4+n])
}

// answerTo is libvirtd's answer to a call of proc whose payload is body and
// names name first: a healthy host whose pool is running, except for the
// names above.
func answerTo(proc uint32, name string, body []byte) (uint32, []byte) {
	w := xdrWriter{}
	switch proc {
	case procStoragePoolLookupByName, procStoragePoolGetInfo, procStorageVolLookupByName:
		if name == MissingPool {
			return statusError, errorPayload(errNoStoragePool, "Storage pool not found: no storage pool with matching name '"+name+"'")
		}
	case procNetworkLookupByName:
		if name == MissingNetwork {
			return statusError, errorPayload(errNoNetwork, "Network not found: no network with matching name '"+name+"'")
		}
	}
	switch proc {
	case procStoragePoolLookupByName, procNetworkLookupByName:
		w.str(name)
		w.b = append(w.b, make([]byte, 16)...)
		return statusOK, w.b
	case procStorageVolLookupByName:
		// The call is the pool (name, uuid), then the volume's name.
		pad := (4 - len(name)%4) % 4
		vol := ""
		if off := 4 + len(name) + pad + 16; off <= len(body) {
			vol = firstString(body[off:])
		}
		if vol == MissingVolume {
			return statusError, errorPayload(errNoStorageVol, "Storage volume not found: no storage vol with matching name '"+vol+"'")
		}
		w.str(name)
		w.str(vol)
		w.str("/var/lib/libvirt/images/" + vol)
		return statusOK, w.b
	case procNetworkIsActive:
		if name == InactiveNetwork {
			w.u32(0)
		} else {
			w.u32(1)
		}
		return statusOK, w.b
	}
	return answer(proc)
}

// answer is libvirtd's answer to proc on a healthy host with a running pool.
func answer(proc uint32) (uint32, []byte) {
	w := xdrWriter{}
	switch proc {
	case procAuthList:
		w.u32(1, 0) // one type: none
	case procConnectOpen, procConnectClose:
	case procConnectGetLibVersion:
		w.u64(9000000)
	case procStoragePoolLookupByName:
		w.str("default")
		w.b = append(w.b, make([]byte, 16)...)
	case procStoragePoolGetInfo:
		w.u32(2) // running
		w.u64(100<<30, 30<<30, 70<<30)
	case procNodeGetFreeMemory:
		w.u64(FakeFreeMemory)
	case procNodeGetInfo:
		for _, c := range "x86_64" + string(make([]byte, 26)) {
			w.u32(uint32(c)) // the model: 32 chars, 4 bytes each
		}
		w.u64(FakeHostMemoryKiB)
		w.u32(FakeHostCPUs, 2400, 1, 1, FakeHostCPUs/2, 2) // cpus, mhz, nodes, sockets, cores, threads
	case procConnectGetAllDomainStats:
		w.u32(FakeDomains)
		for i := range FakeDomains {
			w.str(fmt.Sprintf("proxy-%d", i))
			w.b = append(w.b, make([]byte, 16)...) // uuid
			w.u32(uint32(i + 1))                   // id
			w.u32(6)                               // parameters, of every type the reply may carry
			w.str("state.state")
			w.u32(typedParamInt, 1)
			w.str(statVCPUMaximum)
			w.u32(typedParamUInt, FakeDomainVCPUs)
			w.str(statBalloonMaximum)
			w.u32(typedParamULLong)
			w.u64(FakeDomainMemoryKiB)
			w.str("balloon.rss")
			w.u32(typedParamLLong)
			w.u64(1 << 20)
			w.str("cpu.utilisation")
			w.u32(typedParamDouble)
			w.u64(0x3fe0000000000000) // 0.5
			w.str("vm.name")
			w.u32(typedParamString)
			w.str("proxy")
		}
	case procConnectListAllDomains:
		w.u32(FakeDomains)
		for i := range FakeDomains {
			w.str(fmt.Sprintf("proxy-%d", i))
			w.b = append(w.b, make([]byte, 16)...) // uuid
			w.u32(uint32(i + 1))                   // id
		}
		w.u32(FakeDomains)
	case procStoragePoolListAllVolumes:
		w.u32(FakeVolumes)
		for i := range FakeVolumes {
			name := fmt.Sprintf("proxy-%d.qcow2", i)
			w.str("default")
			w.str(name)
			w.str("/var/lib/libvirt/images/" + name)
		}
		w.u32(FakeVolumes)
	case procStorageVolGetInfo:
		w.u32(0) // file
		w.u64(FakeVolumeCapacity, 1<<30)
	default:
		return statusError, errorPayload(1, "this fake libvirtd does not know that procedure")
	}
	return statusOK, w.b
}

// errorPayload is a remote_error as libvirtd sends it.
func errorPayload(code uint32, msg string) []byte {
	w := xdrWriter{}
	w.u32(code, 0, 1) // code, domain, message present
	w.str(msg)
	w.u32(2, 0, 0, 0, 0, 0, 0, 0) // level, no dom, no str1..3, int1, int2, no net
	return w.b
}

// BrokenReply is the reply to a call of proc with serial, broken by fault.
// Each is a frame a client that trusted its peer would mishandle (go-libvirt
// panicked or allocated gigabytes on them) without the frame checker.
func BrokenReply(fault Fault, proc uint32, serial int32) []byte {
	switch fault {
	case FaultZeroLength:
		b := replyFrame(remoteProgram, proc, serial, statusOK, nil)
		binary.BigEndian.PutUint32(b, 0)
		return b
	case FaultHugeLength:
		b := replyFrame(remoteProgram, proc, serial, statusOK, make([]byte, 64))
		binary.BigEndian.PutUint32(b, 0xfffffff0)
		return b
	case FaultTruncated:
		_, payload := answer(proc)
		b := replyFrame(remoteProgram, proc, serial, statusOK, append(payload, make([]byte, 32)...))
		return b[:minFrameLen+8]
	case FaultWrongProgram:
		_, payload := answer(proc)
		return replyFrame(0x20008087, proc, serial, statusOK, payload) // QEMU_PROGRAM
	case FaultWrongProcedure:
		// REMOTE_PROC_DOMAIN_EVENT_CALLBACK_LIFECYCLE: go-libvirt decoded
		// a frame naming an event procedure as that event, in its reader.
		w := xdrWriter{}
		w.u32(1, 0x7ffffff0) // callbackID, then a domain name that claims 2 GiB
		return replyFrame(remoteProgram, 318, serial, statusOK, w.b)
	case FaultGarbageXDR:
		w := xdrWriter{}
		switch proc {
		case procStoragePoolLookupByName:
			w.u32(0x7ffffff0) // a pool name that claims 2 GiB
		case procAuthList:
			w.u32(0x40000000) // a billion auth types
		default:
			w.u32(0xdeadbeef, 0xffffffff, 7) // neither the shape nor the values
		}
		return replyFrame(remoteProgram, proc, serial, statusOK, w.b)
	}
	panic("unknown fault")
}

// replyFrame is a whole reply frame: length, header, payload.
func replyFrame(program, proc uint32, serial int32, status uint32, payload []byte) []byte {
	w := xdrWriter{}
	w.u32(uint32(minFrameLen+len(payload)), program, remoteProtocolVersion, proc, frameReply, uint32(serial), status)
	return append(w.b, payload...)
}

// callFrame is a call as rpcClient sends it.
func callFrame(proc uint32, serial int32, payload []byte) []byte {
	w := xdrWriter{}
	w.u32(uint32(minFrameLen+len(payload)), remoteProgram, remoteProtocolVersion, proc, frameCall, uint32(serial), statusOK)
	return append(w.b, payload...)
}

type xdrWriter struct{ b []byte }

func (w *xdrWriter) u32(vs ...uint32) {
	for _, v := range vs {
		w.b = binary.BigEndian.AppendUint32(w.b, v)
	}
}

func (w *xdrWriter) u64(vs ...uint64) {
	for _, v := range vs {
		w.b = binary.BigEndian.AppendUint64(w.b, v)
	}
}

func (w *xdrWriter) str(s string) {
	w.u32(uint32(len(s)))
	w.b = append(w.b, s...)
	w.b = append(w.b, make([]byte, (4-len(s)%4)%4)...)
}

package kvm

import (
	"fmt"
	"strings"

	"github.com/digitalocean/go-libvirt"
)

// The procedures a check calls (remote_protocol.x's REMOTE_PROC_*): the
// only ones the client sends and the only ones whose replies the frame
// checker lets through. Every procedure number of the package is here.
const (
	procConnectOpen             = 1
	procConnectClose            = 2
	procNodeGetInfo             = 6
	procNetworkLookupByName     = 46
	procAuthList                = 66
	procAuthPolkit              = 70
	procStoragePoolLookupByName = 84
	procStoragePoolGetInfo      = 87
	procStorageVolLookupByName  = 95
	procStorageVolGetInfo       = 98
	procNodeGetFreeMemory       = 102
	procNetworkIsActive         = 152
	procConnectGetLibVersion    = 157
	// The promised-resource keys' procedures (docs/configuration.md:
	// "Promised resources (KVM)").
	procStoragePoolListAllVolumes = 282
	procConnectGetAllDomainStats  = 344
	// The proxies' count (docs/configuration.md: "Failure domains
	// (KVM)"), made only where proxy_vm_name is set and the domain stats
	// are not read anyway.
	procConnectListAllDomains = 273
)

// field is one XDR field of a reply's shape.
type field uint8

const (
	fieldInt         field = iota // an int or unsigned int: 4 bytes
	fieldUChar                    // an unsigned char: 4 bytes in XDR, at most 255
	fieldHyper                    // an unsigned hyper: 8 bytes, the high word first
	fieldString                   // a remote_nonnull_string: length, bytes, padding
	fieldUUID                     // a remote_uuid: 16 bytes, no length
	fieldAuthTypes                // remote_auth_type<REMOTE_AUTH_TYPE_LIST_MAX>
	fieldChars32                  // char model[32]: 32 chars of 4 bytes each, read and dropped
	fieldVols                     // remote_nonnull_storage_vol vols<REMOTE_STORAGE_VOL_LIST_MAX>
	fieldDomainStats              // remote_domain_stats_record retStats<REMOTE_DOMAIN_LIST_MAX>
	fieldDomains                  // remote_nonnull_domain domains<REMOTE_DOMAIN_LIST_MAX>
)

// Bounds of the lists of the promised-resource replies (remote_protocol.x).
const (
	storageVolListMax    = 16384 // REMOTE_STORAGE_VOL_LIST_MAX
	domainListMax        = 16384 // REMOTE_DOMAIN_LIST_MAX
	domainStatsParamsMax = 4096  // REMOTE_CONNECT_GET_ALL_DOMAIN_STATS_MAX
	typedParamInt        = 1     // VIR_TYPED_PARAM_INT ... VIR_TYPED_PARAM_STRING
	typedParamUInt       = 2
	typedParamLLong      = 3
	typedParamULLong     = 4
	typedParamDouble     = 5
	typedParamBoolean    = 6
	typedParamString     = 7
	statVCPUMaximum      = "vcpu.maximum"    // VIR_DOMAIN_STATS_VCPU: vCPUs the domain may run, whatever its state
	statBalloonMaximum   = "balloon.maximum" // VIR_DOMAIN_STATS_BALLOON: the domain's maximum memory in KiB
	// maxListReplyLen bounds the two replies that list a host's domains
	// or a pool's volumes. A shut-off domain's record is some 120 bytes,
	// a running one's about 1 KiB with 4 vCPUs (libvirt adds per-vCPU and
	// balloon statistics the check does not read), a volume some 150
	// bytes: 1 MiB holds about 1,000 running domains or 7,000 volumes,
	// far more than a hypervisor has, and is what one such reply of a
	// hostile peer can make the exporter hold.
	maxListReplyLen = 1<<20 + frameLenSize
)

// procedure is what the package knows of one procedure: its name in errors
// (libvirt's API name) and the shape of its reply (remote_protocol.x's
// remote_*_ret). The frame checker decodes a reply by this shape, and
// refuses one that does not have it, before the client sees it; the
// client's methods read the values it decoded, in the order of the shape.
type procedure struct {
	name  string
	reply []field
	// maxLen, when set, is the largest frame a reply may have instead of
	// maxReplyLen: a list of every domain or volume of a host grows with
	// the host.
	maxLen uint32
}

// procedures is the one table of the procedures a check calls.
var procedures = map[uint32]procedure{
	procConnectOpen:             {"ConnectOpen", nil, 0},
	procConnectClose:            {"ConnectClose", nil, 0},
	procNetworkLookupByName:     {"NetworkLookupByName", []field{fieldString, fieldUUID}, 0},
	procAuthList:                {"AuthList", []field{fieldAuthTypes}, 0},
	procAuthPolkit:              {"AuthPolkit", []field{fieldInt}, 0}, // complete
	procStoragePoolLookupByName: {"StoragePoolLookupByName", []field{fieldString, fieldUUID}, 0},
	// state, capacity, allocation, available
	procStoragePoolGetInfo: {"StoragePoolGetInfo", []field{fieldUChar, fieldHyper, fieldHyper, fieldHyper}, 0},
	// the volume's pool, name and key
	procStorageVolLookupByName: {"StorageVolLookupByName", []field{fieldString, fieldString, fieldString}, 0},
	procNodeGetFreeMemory:      {"NodeGetFreeMemory", []field{fieldHyper}, 0},
	procNetworkIsActive:        {"NetworkIsActive", []field{fieldInt}, 0},
	procConnectGetLibVersion:   {"ConnectGetLibVersion", []field{fieldHyper}, 0},
	// remote_node_get_info_ret: model, memory (KiB), cpus, mhz, nodes,
	// sockets, cores, threads
	procNodeGetInfo: {"NodeGetInfo", []field{fieldChars32, fieldHyper, fieldInt, fieldInt, fieldInt, fieldInt, fieldInt, fieldInt}, 0},
	// remote_storage_vol_get_info_ret: type (a char), capacity, allocation
	procStorageVolGetInfo: {"StorageVolGetInfo", []field{fieldInt, fieldHyper, fieldHyper}, 0},
	// remote_storage_pool_list_all_volumes_ret: the volumes, then their count
	procStoragePoolListAllVolumes: {"StoragePoolListAllVolumes", []field{fieldVols, fieldInt}, maxListReplyLen},
	// remote_connect_get_all_domain_stats_ret: one record per domain
	procConnectGetAllDomainStats: {"ConnectGetAllDomainStats", []field{fieldDomainStats}, maxListReplyLen},
	// remote_connect_list_all_domains_ret: the domains, then their count
	procConnectListAllDomains: {"ConnectListAllDomains", []field{fieldDomains, fieldInt}, maxListReplyLen},
}

// replyLimit is the largest frame a reply to proc may have.
func replyLimit(proc uint32) uint32 {
	if p, ok := procedures[proc]; ok && p.maxLen > 0 {
		return p.maxLen
	}
	return maxReplyLen
}

// procName names proc in errors.
func procName(proc uint32) string {
	if p, ok := procedures[proc]; ok {
		return p.name
	}
	return fmt.Sprintf("procedure %d", proc)
}

// values is a reply decoded by its procedure's shape: its numbers (ints,
// unsigned chars, hypers), strings and UUID, each in the order of the
// shape, and the lists of the few replies that have one. No reply of the
// table has more numbers or strings than these hold.
//
// values is copied by value from the frame's decoder up to the call's
// caller, a frame on the check's stack at each step: the lists sit behind
// one pointer so that they add 8 bytes to each copy, not 72. With the three
// lists inline, the steady check's call path grew by 1.2 KB and its
// goroutine's stack had to grow once more, a copy of the whole stack at
// every check (docs/scaling.md: "What a kind costs a replica that does not
// use it").
type values struct {
	nums  [8]uint64
	strs  [3]string
	uuid  libvirt.UUID
	lists *replyLists
}

// replyLists are the lists of a reply: the auth types of an auth list, a
// volume list's volumes, a domain stats reply's domains with the two
// statistics the capacity reads.
type replyLists struct {
	auths []uint32
	vols  []libvirt.StorageVol
	doms  []domainStat
	names []string
}

// list is v's lists, made when the first is decoded.
func (v *values) list() *replyLists {
	if v.lists == nil {
		v.lists = &replyLists{}
	}
	return v.lists
}

// auths, vols and doms are v's lists, nil when the reply has none.
func (v *values) auths() []uint32 {
	if v.lists == nil {
		return nil
	}
	return v.lists.auths
}

func (v *values) vols() []libvirt.StorageVol {
	if v.lists == nil {
		return nil
	}
	return v.lists.vols
}

func (v *values) doms() []domainStat {
	if v.lists == nil {
		return nil
	}
	return v.lists.doms
}

func (v *values) names() []string {
	if v.lists == nil {
		return nil
	}
	return v.lists.names
}

// domainStat is what ConnectGetAllDomainStats says of one domain that the
// capacity reads: its vCPUs and maximum memory (KiB), each when present.
type domainStat struct {
	name                string
	vcpus, memoryKiB    uint64
	hasVCPUs, hasMemory bool
}

// decodeReply decodes the payload of an ok reply to proc by the table's
// shape: every field whole, every length within what was sent and within
// libvirt's bounds, no byte after the last field.
func decodeReply(proc uint32, payload []byte) (values, error) {
	var v values
	p, ok := procedures[proc]
	if !ok {
		return v, badFrame("reply to procedure %d, which this exporter never calls", proc)
	}
	r := xdrReader{b: payload}
	nums, strs := 0, 0
	for _, f := range p.reply {
		switch f {
		case fieldInt:
			v.nums[nums] = uint64(r.uint32s(1))
			nums++
		case fieldUChar:
			if v.nums[nums] = uint64(r.uint32s(1)); r.err == nil && v.nums[nums] > 0xff {
				return v, badFrame("reply to %s has %d where an unsigned char is due", p.name, v.nums[nums])
			}
			nums++
		case fieldHyper:
			v.nums[nums] = r.uint64()
			nums++
		case fieldString:
			v.strs[strs] = r.string("string")
			strs++
		case fieldUUID:
			copy(v.uuid[:], r.opaque(len(v.uuid), "uuid"))
		case fieldChars32:
			r.uint32s(32)
		case fieldVols:
			n := r.uint32s(1)
			if r.err == nil && n > storageVolListMax {
				return v, badFrame("reply to %s has %d volumes, libvirt sends at most %d", p.name, n, storageVolListMax)
			}
			for range n {
				if r.err != nil {
					break
				}
				vol := libvirt.StorageVol{Pool: r.string("volume pool"), Name: r.string("volume name"), Key: r.string("volume key")}
				v.list().vols = append(v.list().vols, vol)
			}
		case fieldDomains:
			// Each a name, a UUID and an id: only the name is kept.
			n := r.uint32s(1)
			if r.err == nil && n > domainListMax {
				return v, badFrame("reply to %s has %d domains, libvirt sends at most %d", p.name, n, domainListMax)
			}
			for range n {
				name := r.string("domain name")
				r.opaque(16, "domain uuid")
				r.uint32s(1) // id
				if r.err != nil {
					break
				}
				v.list().names = append(v.list().names, name)
			}
		case fieldDomainStats:
			doms, err := decodeDomainStats(&r, p.name)
			if err != nil {
				return v, err
			}
			v.list().doms = doms
		case fieldAuthTypes:
			n := r.uint32s(1)
			if r.err == nil && n > authTypeListMax {
				return v, badFrame("reply to %s has %d auth types, libvirt sends at most %d", p.name, n, authTypeListMax)
			}
			for range n {
				v.list().auths = append(v.list().auths, r.uint32s(1))
			}
		}
	}
	if r.err != nil {
		return v, badFrame("reply to %s: %v", p.name, r.err)
	}
	if len(r.b) != 0 {
		return v, badFrame("reply to %s has %d bytes after its value", p.name, len(r.b))
	}
	return v, nil
}

// decodeDomainStats reads the records of a ConnectGetAllDomainStats
// reply: per domain its name, UUID and id, then its typed parameters, each
// a name and a value of the type it names. Only vcpu.maximum and
// balloon.maximum are kept; a parameter of a type libvirt does not have is
// a broken reply, since what follows it cannot be found.
func decodeDomainStats(r *xdrReader, proc string) ([]domainStat, error) {
	n := r.uint32s(1)
	if r.err == nil && n > domainListMax {
		return nil, badFrame("reply to %s has %d domains, libvirt sends at most %d", proc, n, domainListMax)
	}
	var doms []domainStat
	for range n {
		d := domainStat{name: r.string("domain name")}
		r.opaque(16, "domain uuid")
		r.uint32s(1) // id
		params := r.uint32s(1)
		if r.err != nil {
			break
		}
		if params > domainStatsParamsMax {
			return nil, badFrame("reply to %s has %d parameters for domain %q, libvirt sends at most %d", proc, params, d.name, domainStatsParamsMax)
		}
		for range params {
			field := r.string("parameter name")
			typ := r.uint32s(1)
			if r.err != nil {
				break
			}
			var val uint64
			switch typ {
			case typedParamInt, typedParamUInt, typedParamBoolean:
				val = uint64(r.uint32s(1))
			case typedParamLLong, typedParamULLong, typedParamDouble:
				val = r.uint64()
			case typedParamString:
				r.string("parameter value")
			default:
				return nil, badFrame("reply to %s: parameter %q of domain %q has type %d, which libvirt does not have", proc, field, d.name, typ)
			}
			switch {
			case field == statVCPUMaximum && typ == typedParamUInt:
				d.vcpus, d.hasVCPUs = val, true
			case field == statBalloonMaximum && typ == typedParamULLong:
				d.memoryKiB, d.hasMemory = val, true
			}
		}
		if r.err != nil {
			break
		}
		doms = append(doms, d)
	}
	return doms, nil
}

// decodeError decodes the remote_error of an error reply to proc into the
// error the call returns: what libvirt's own client (virNetClientProgramCall)
// makes of it, since an error reply fails the call whatever its code.
// go-libvirt took code 0 (VIR_ERR_OK) for success, which handed the
// error's fields to the caller as the reply's value.
//
// Only the fields up to the level are read: code, domain, message (an
// optional string: its presence, then the string when present) and level.
// A NULL message (libvirtd sends one for an error it has no words for) is
// an absent message: the code still classifies.
func decodeError(proc uint32, payload []byte) (error, error) {
	r := xdrReader{b: payload}
	code := r.uint32s(1)
	r.uint32s(1) // domain
	present := r.uint32s(1)
	var msg string
	switch {
	case r.err != nil:
	case present == 1:
		msg = r.string("error message")
	case present != 0:
		return nil, badFrame("error reply to %s: message presence %d, want 0 or 1", procName(proc), present)
	}
	r.uint32s(1) // level
	if r.err != nil {
		return nil, badFrame("error reply to %s: %v", procName(proc), r.err)
	}
	lerr := libvirt.Error{Code: code, Message: msg}
	switch {
	case present == 0:
		return fmt.Errorf("libvirtd answered %s with error %d and no message: %w", procName(proc), code, lerr), nil
	case strings.Contains(msg, "unknown procedure"):
		// A procedure this libvirtd does not have, as go-libvirt
		// reported it.
		return libvirt.ErrUnsupported, nil
	}
	return lerr, nil
}

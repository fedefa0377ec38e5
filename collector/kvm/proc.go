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
	procNetworkLookupByName     = 46
	procAuthList                = 66
	procAuthPolkit              = 70
	procStoragePoolLookupByName = 84
	procStoragePoolGetInfo      = 87
	procStorageVolLookupByName  = 95
	procNodeGetFreeMemory       = 102
	procNetworkIsActive         = 152
	procConnectGetLibVersion    = 157
)

// field is one XDR field of a reply's shape.
type field uint8

const (
	fieldInt       field = iota // an int or unsigned int: 4 bytes
	fieldUChar                  // an unsigned char: 4 bytes in XDR, at most 255
	fieldHyper                  // an unsigned hyper: 8 bytes, the high word first
	fieldString                 // a remote_nonnull_string: length, bytes, padding
	fieldUUID                   // a remote_uuid: 16 bytes, no length
	fieldAuthTypes              // remote_auth_type<REMOTE_AUTH_TYPE_LIST_MAX>
)

// procedure is what the package knows of one procedure: its name in errors
// (libvirt's API name) and the shape of its reply (remote_protocol.x's
// remote_*_ret). The frame checker decodes a reply by this shape, and
// refuses one that does not have it, before the client sees it; the
// client's methods read the values it decoded, in the order of the shape.
type procedure struct {
	name  string
	reply []field
}

// procedures is the one table of the procedures a check calls.
var procedures = map[uint32]procedure{
	procConnectOpen:             {"ConnectOpen", nil},
	procConnectClose:            {"ConnectClose", nil},
	procNetworkLookupByName:     {"NetworkLookupByName", []field{fieldString, fieldUUID}},
	procAuthList:                {"AuthList", []field{fieldAuthTypes}},
	procAuthPolkit:              {"AuthPolkit", []field{fieldInt}}, // complete
	procStoragePoolLookupByName: {"StoragePoolLookupByName", []field{fieldString, fieldUUID}},
	// state, capacity, allocation, available
	procStoragePoolGetInfo: {"StoragePoolGetInfo", []field{fieldUChar, fieldHyper, fieldHyper, fieldHyper}},
	// the volume's pool, name and key
	procStorageVolLookupByName: {"StorageVolLookupByName", []field{fieldString, fieldString, fieldString}},
	procNodeGetFreeMemory:      {"NodeGetFreeMemory", []field{fieldHyper}},
	procNetworkIsActive:        {"NetworkIsActive", []field{fieldInt}},
	procConnectGetLibVersion:   {"ConnectGetLibVersion", []field{fieldHyper}},
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
// shape, and the auth types of an auth list. No reply of the table has
// more numbers or strings than these hold.
type values struct {
	nums  [4]uint64
	strs  [3]string
	uuid  libvirt.UUID
	auths []uint32
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
		case fieldAuthTypes:
			n := r.uint32s(1)
			if r.err == nil && n > authTypeListMax {
				return v, badFrame("reply to %s has %d auth types, libvirt sends at most %d", p.name, n, authTypeListMax)
			}
			for range n {
				v.auths = append(v.auths, r.uint32s(1))
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

package kvm

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/digitalocean/go-libvirt"
)

// scriptedLibvirtd answers each call on the server end of a pipe with what
// reply returns for it (nil hangs up), and records the calls it saw.
type scriptedLibvirtd struct {
	calls []uint32
	args  [][]byte
}

func (s *scriptedLibvirtd) serve(t *testing.T, conn net.Conn, reply func(h header, body []byte) []byte) {
	t.Helper()
	defer conn.Close()
	for {
		var hb [minFrameLen]byte
		if _, err := io.ReadFull(conn, hb[:]); err != nil {
			return
		}
		h := parseHeader(hb[:])
		body := make([]byte, int(h.length)-minFrameLen)
		if _, err := io.ReadFull(conn, body); err != nil {
			return
		}
		s.calls = append(s.calls, h.procedure)
		s.args = append(s.args, body)
		b := reply(h, body)
		if b == nil {
			return
		}
		if _, err := conn.Write(b); err != nil {
			return
		}
	}
}

// startScripted returns a client whose libvirtd answers with reply.
func startScripted(t *testing.T, reply func(h header, body []byte) []byte) (libvirtClient, *scriptedLibvirtd, <-chan struct{}) {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close() })
	s := &scriptedLibvirtd{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.serve(t, server, reply)
	}()
	return newLibvirtClient(client), s, done
}

// TestRPCHandshake checks the calls ConnectToURI makes for each auth list
// libvirtd may offer, and the connect open's arguments.
func TestRPCHandshake(t *testing.T) {
	for _, tt := range []struct {
		name  string
		types []uint32
		want  []uint32
	}{
		{"none", []uint32{authNone}, []uint32{procAuthList, procConnectOpen}},
		{"polkit", []uint32{authPolkit}, []uint32{procAuthList, procAuthPolkit, procConnectOpen}},
		{"sasl then none", []uint32{1, authNone, authPolkit}, []uint32{procAuthList, procConnectOpen}},
		{"sasl then polkit", []uint32{1, authPolkit}, []uint32{procAuthList, procAuthPolkit, procConnectOpen}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lv, s, done := startScripted(t, func(h header, _ []byte) []byte {
				w := xdrWriter{}
				switch h.procedure {
				case procAuthList:
					w.u32(uint32(len(tt.types)))
					w.u32(tt.types...)
				case procAuthPolkit:
					w.u32(1)
				}
				return replyFrame(remoteProgram, h.procedure, h.serial, statusOK, w.b)
			})
			if err := lv.ConnectToURI("qemu:///system"); err != nil {
				t.Fatal(err)
			}
			lv.(*rpcClient).frames.Close()
			<-done
			if !slices.Equal(s.calls, tt.want) {
				t.Fatalf("calls %v, want %v", s.calls, tt.want)
			}
			open := xdrWriter{}
			open.u32(1)
			open.str("qemu:///system")
			open.u32(0)
			if got := s.args[len(s.args)-1]; !bytes.Equal(got, open.b) {
				t.Errorf("connect open's arguments %x, want %x", got, open.b)
			}
		})
	}
}

// TestRPCCalls checks each call's arguments as libvirtd reads them and
// its reply as the checks get it: values, libvirt's errors, a connection
// that ends, a malformed reply.
func TestRPCCalls(t *testing.T) {
	pool := libvirt.StoragePool{Name: "images", UUID: libvirt.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}
	poolArgs := xdrWriter{}
	poolArgs.str(pool.Name)
	poolArgs.b = append(poolArgs.b, pool.UUID[:]...)

	t.Run("values", func(t *testing.T) {
		lv, s, _ := startScripted(t, func(h header, body []byte) []byte {
			w := xdrWriter{}
			switch h.procedure {
			case procStoragePoolLookupByName:
				w.str(firstString(body))
				w.b = append(w.b, pool.UUID[:]...)
			case procStoragePoolGetInfo:
				w.u32(2)
				w.u64(100<<30, 30<<30, 70<<30)
			case procNodeGetFreeMemory:
				w.u64(5 << 40)
			case procStorageVolLookupByName:
				w.str("images")
				w.str("base.qcow2")
				w.str("/var/lib/libvirt/images/base.qcow2")
			case procNetworkLookupByName:
				w.str(firstString(body))
				w.b = append(w.b, pool.UUID[:]...)
			case procNetworkIsActive:
				w.u32(1)
			case procConnectGetLibVersion:
				w.u64(10000001)
			}
			return replyFrame(remoteProgram, h.procedure, h.serial, statusOK, w.b)
		})
		p, err := lv.StoragePoolLookupByName("images")
		if err != nil || p != pool {
			t.Fatalf("lookup: %+v, %v; want %+v", p, err, pool)
		}
		state, capacity, allocation, available, err := lv.StoragePoolGetInfo(p)
		if err != nil || state != 2 || capacity != 100<<30 || allocation != 30<<30 || available != 70<<30 {
			t.Fatalf("info: %d %d %d %d %v", state, capacity, allocation, available, err)
		}
		if !bytes.Equal(s.args[1], poolArgs.b) {
			t.Errorf("info's arguments %x, want the pool's name and uuid %x", s.args[1], poolArgs.b)
		}
		if free, err := lv.NodeGetFreeMemory(); err != nil || free != 5<<40 {
			t.Errorf("free memory: %d, %v", free, err)
		}
		vol, err := lv.StorageVolLookupByName(p, "base.qcow2")
		if err != nil || vol.Name != "base.qcow2" || vol.Pool != "images" || vol.Key != "/var/lib/libvirt/images/base.qcow2" {
			t.Errorf("volume: %+v, %v", vol, err)
		}
		volArgs := xdrWriter{b: bytes.Clone(poolArgs.b)}
		volArgs.str("base.qcow2")
		if !bytes.Equal(s.args[3], volArgs.b) {
			t.Errorf("volume lookup's arguments %x, want %x", s.args[3], volArgs.b)
		}
		n, err := lv.NetworkLookupByName("proxies")
		if err != nil || n.Name != "proxies" || n.UUID != pool.UUID {
			t.Errorf("network: %+v, %v", n, err)
		}
		if active, err := lv.NetworkIsActive(n); err != nil || active != 1 {
			t.Errorf("network active: %d, %v", active, err)
		}
		if v, err := lv.ConnectGetLibVersion(); err != nil || v != 10000001 {
			t.Errorf("version: %d, %v", v, err)
		}
	})

	t.Run("libvirt errors", func(t *testing.T) {
		lv, _, _ := startScripted(t, func(h header, _ []byte) []byte {
			if h.procedure == procNodeGetFreeMemory {
				return replyFrame(remoteProgram, h.procedure, h.serial, statusError, errorPayload(1, "unknown procedure: 102"))
			}
			return replyFrame(remoteProgram, h.procedure, h.serial, statusError, errorPayload(errNoStoragePool, "Storage pool not found: no storage pool with matching uuid"))
		})
		_, _, _, _, err := lv.StoragePoolGetInfo(pool)
		var lerr libvirt.Error
		if !errors.As(err, &lerr) || !libvirtCode(err, libvirt.ErrNoStoragePool) || lerr.Message != "Storage pool not found: no storage pool with matching uuid" {
			t.Errorf("got %#v, want libvirt's error 49 with its message", err)
		}
		if _, err := lv.NodeGetFreeMemory(); !errors.Is(err, libvirt.ErrUnsupported) {
			t.Errorf("got %v, want ErrUnsupported for a procedure libvirtd does not know", err)
		}
	})

	// libvirt's own client fails every error reply, whatever its code
	// (virNetClientProgramCall); a NULL message is an absent one.
	t.Run("error replies libvirt's way", func(t *testing.T) {
		nullMessage := func(code uint32) []byte {
			w := xdrWriter{}
			w.u32(code, 18, 0)            // code, domain (storage), no message
			w.u32(2, 0, 0, 0, 0, 0, 0, 0) // level, no dom, no str1..3, int1, int2, no net
			return w.b
		}
		var replies [][]byte
		lv, _, _ := startScripted(t, func(h header, _ []byte) []byte {
			b := replies[0]
			replies = replies[1:]
			return replyFrame(remoteProgram, h.procedure, h.serial, statusError, b)
		})
		replies = append(replies, nullMessage(errNoStoragePool))
		_, _, _, _, err := lv.StoragePoolGetInfo(pool)
		var lerr libvirt.Error
		if !libvirtCode(err, libvirt.ErrNoStoragePool) || !errors.As(err, &lerr) || lerr.Message != "" || strings.Contains(err.Error(), "\x00") ||
			!strings.Contains(err.Error(), "StoragePoolGetInfo with error 49 and no message") {
			t.Errorf("NULL message: got %q (%#v), want error 49 with its message absent", err, err)
		}
		for _, tc := range []struct {
			name    string
			payload []byte
		}{
			{"VIR_ERR_OK with a message", errorPayload(uint32(libvirt.ErrOk), "no error")},
			{"VIR_ERR_OK without a message", nullMessage(uint32(libvirt.ErrOk))},
		} {
			replies = append(replies, tc.payload)
			state, capacity, _, _, err := lv.StoragePoolGetInfo(pool)
			if !errors.As(err, &lerr) || lerr.Code != uint32(libvirt.ErrOk) || !libvirtError(err) || state != 0 || capacity != 0 {
				t.Errorf("%s: got %d %d, %#v; want the call failed with libvirt's error 0, not its fields taken for the pool's", tc.name, state, capacity, err)
			}
		}
		// ConnectOpen has no value: an error reply that took code 0 for
		// success would have opened a connection libvirtd refused.
		replies = append(replies, errorPayload(uint32(libvirt.ErrOk), "refused"))
		if err := lv.ConnectClose(); err == nil {
			t.Error("ConnectClose answered with an error of code 0: got success")
		}
	})

	t.Run("an error reply whose message presence is neither 0 nor 1", func(t *testing.T) {
		lv, _, _ := startScripted(t, func(h header, _ []byte) []byte {
			w := xdrWriter{}
			w.u32(errNoStoragePool, 18, 2, 2)
			return replyFrame(remoteProgram, h.procedure, h.serial, statusError, w.b)
		})
		var fe *frameError
		if _, _, _, _, err := lv.StoragePoolGetInfo(pool); !errors.As(err, &fe) || !strings.Contains(err.Error(), "message presence 2") {
			t.Errorf("got %v, want a malformed frame naming the presence flag", err)
		}
	})

	t.Run("connection ends", func(t *testing.T) {
		lv, _, _ := startScripted(t, func(header, []byte) []byte { return nil })
		_, _, _, _, err := lv.StoragePoolGetInfo(pool)
		if err == nil || libvirtError(err) || !strings.Contains(err.Error(), "StoragePoolGetInfo unanswered") {
			t.Errorf("got %v, want the call named unanswered, not a libvirt error", err)
		}
	})

	t.Run("malformed reply", func(t *testing.T) {
		lv, s, _ := startScripted(t, func(h header, _ []byte) []byte {
			return BrokenReply(FaultGarbageXDR, h.procedure, h.serial)
		})
		_, _, _, _, err := lv.StoragePoolGetInfo(pool)
		var fe *frameError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "malformed libvirt frame") {
			t.Fatalf("got %v, want the malformed frame named", err)
		}
		// The connection is closed; a later call says why without
		// writing anything.
		_, err2 := lv.NodeGetFreeMemory()
		if !errors.As(err2, &fe) || len(s.calls) != 1 {
			t.Errorf("second call: %v after %d calls sent, want the same violation and no call sent", err2, len(s.calls))
		}
	})
}

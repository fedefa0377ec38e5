package kvm

import (
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
)

// recordingClient answers every call with zero values.
type recordingClient struct{ calls []string }

func (r *recordingClient) NodeGetInfo() (nodeInfo, error) {
	r.calls = append(r.calls, "NodeGetInfo")
	return nodeInfo{}, nil
}

func (r *recordingClient) ConnectGetAllDomainStats() ([]domainStat, error) {
	r.calls = append(r.calls, "ConnectGetAllDomainStats")
	return nil, nil
}

func (r *recordingClient) StoragePoolListAllVolumes(libvirt.StoragePool) ([]libvirt.StorageVol, error) {
	r.calls = append(r.calls, "StoragePoolListAllVolumes")
	return nil, nil
}

func (r *recordingClient) ConnectListAllDomains() ([]string, error) {
	r.calls = append(r.calls, "ConnectListAllDomains")
	return nil, nil
}

func (r *recordingClient) StorageVolGetInfo(libvirt.StorageVol) (uint64, error) {
	r.calls = append(r.calls, "StorageVolGetInfo")
	return 0, nil
}

func (r *recordingClient) ConnectToURI(libvirt.ConnectURI) error {
	r.calls = append(r.calls, "ConnectToURI")
	return nil
}

func (r *recordingClient) ConnectGetLibVersion() (uint64, error) {
	r.calls = append(r.calls, "ConnectGetLibVersion")
	return 9000000, nil
}

func (r *recordingClient) StoragePoolLookupByName(string) (libvirt.StoragePool, error) {
	r.calls = append(r.calls, "StoragePoolLookupByName")
	return libvirt.StoragePool{}, nil
}

func (r *recordingClient) StoragePoolGetInfo(libvirt.StoragePool) (uint8, uint64, uint64, uint64, error) {
	r.calls = append(r.calls, "StoragePoolGetInfo")
	return 2, 0, 0, 0, nil
}

func (r *recordingClient) StorageVolLookupByName(libvirt.StoragePool, string) (libvirt.StorageVol, error) {
	r.calls = append(r.calls, "StorageVolLookupByName")
	return libvirt.StorageVol{}, nil
}

func (r *recordingClient) NetworkLookupByName(string) (libvirt.Network, error) {
	r.calls = append(r.calls, "NetworkLookupByName")
	return libvirt.Network{}, nil
}

func (r *recordingClient) NetworkIsActive(libvirt.Network) (int32, error) {
	r.calls = append(r.calls, "NetworkIsActive")
	return 1, nil
}

func (r *recordingClient) ConnectClose() error {
	r.calls = append(r.calls, "ConnectClose")
	return nil
}

// TestEveryCallIsLogged calls every method of libvirtClient through the
// logging wrapper, found by reflection, so a method added to the interface
// without a logging wrapper fails here: the call must reach the client and
// leave a debug line naming it.
func TestEveryCallIsLogged(t *testing.T) {
	iface := reflect.TypeOf((*libvirtClient)(nil)).Elem()
	if iface.NumMethod() == 0 {
		t.Fatal("libvirtClient has no methods")
	}
	for i := range iface.NumMethod() {
		m := iface.Method(i)
		t.Run(m.Name, func(t *testing.T) {
			var buf strings.Builder
			rec := &recordingClient{}
			var wrapped libvirtClient = loggedClient{next: rec, logger: bufLogger(&buf)}
			fn := reflect.ValueOf(wrapped).MethodByName(m.Name)
			args := make([]reflect.Value, m.Type.NumIn())
			for j := range args {
				args[j] = reflect.Zero(m.Type.In(j))
			}
			fn.Call(args)
			if len(rec.calls) != 1 || rec.calls[0] != m.Name {
				t.Errorf("wrapper of %s called %v on the client, want exactly [%s]", m.Name, rec.calls, m.Name)
			}
			if !strings.Contains(buf.String(), "level=DEBUG") || !strings.Contains(buf.String(), "call="+m.Name+" ") {
				t.Errorf("wrapper of %s logged %q, want a debug line with call=%s", m.Name, buf.String(), m.Name)
			}
		})
	}
}

func TestFormatVersion(t *testing.T) {
	for v, want := range map[uint64]string{9000000: "9.0.0", 10002003: "10.2.3", 8010000: "8.10.0", 0: "0.0.0"} {
		if got := formatVersion(v); got != want {
			t.Errorf("formatVersion(%d) = %q, want %q", v, got, want)
		}
	}
}

// TestPoolStateWords: libvirt's numbering is the framework's pool state set.
func TestPoolStateWords(t *testing.T) {
	for i, want := range PoolStates {
		if got := poolStateWord(uint8(i)); got != want {
			t.Errorf("state %d: %q, want %q", i, got, want)
		}
	}
	if got := poolStateWord(uint8(len(PoolStates))); got != "" {
		t.Errorf("unknown state: %q, want empty", got)
	}
}

func bufLogger(w *strings.Builder) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestSignerCache: a key is parsed once per content, errors included, and
// again when the file changes.
func TestSignerCache(t *testing.T) {
	var c signerCache
	parses := 0
	parse := func() (ssh.Signer, error) {
		parses++
		return nil, errors.New("bad passphrase")
	}
	for range 3 {
		if _, err := c.signer([]byte("key"), []byte("pass"), parse); err == nil {
			t.Fatal("want the parse error")
		}
	}
	if parses != 1 {
		t.Errorf("parsed %d times for one content, want 1", parses)
	}
	_, _ = c.signer([]byte("key"), []byte("other pass"), parse)
	_, _ = c.signer([]byte("rotated key"), []byte("pass"), parse)
	if parses != 3 {
		t.Errorf("parsed %d times for three contents, want 3", parses)
	}
}

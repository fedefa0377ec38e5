package kubernetes

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestKubeconfigFilesThatWouldHang: a kubeconfig that is a named pipe, a
// symlink to /dev/zero, or over its cap gives CredentialsUnavailable at
// once, naming the path; repaired, it is picked up at the next check.
func TestKubeconfigFilesThatWouldHang(t *testing.T) {
	t.Parallel()
	srv := newAPIServer(t, true, func(w http.ResponseWriter, _ *http.Request) { writePodList(w) })
	good, err := os.ReadFile(kubeconfig(t, srv.URL, srv.caPEM(), nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"named pipe", func(p string) error { return syscall.Mkfifo(p, 0o600) }, "not a regular file (a named pipe)"},
		{"symlink to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, "not a regular file (a character device)"},
		{"over the cap", func(p string) error { return os.WriteFile(p, make([]byte, 4<<20+1), 0o600) }, "may be at most 4 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "kubeconfig")
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			c := newTestChecker(t, path)
			v := check(c)
			if v.Reason != provider.ReasonCredentialsUnavailable || !strings.Contains(v.Message, tc.want) || !strings.Contains(v.Message, path) {
				t.Errorf("verdict %s (%s), want CredentialsUnavailable naming %s and %q", v.Reason, v.Message, path, tc.want)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, good, 0o600); err != nil {
				t.Fatal(err)
			}
			if v := check(c); v.Reason != provider.ReasonReady {
				t.Errorf("repaired: %s (%s), want Ready", v.Reason, v.Message)
			}
		})
	}
}

// TestSecretMountedKubeconfigAndToken: files behind the symlinks of a
// Secret mount are read, and a token rotated by swapping the mount's
// ..data symlink is picked up without a reload.
func TestSecretMountedKubeconfigAndToken(t *testing.T) {
	t.Parallel()
	var want atomic.Value
	want.Store("Bearer first")
	srv := newAPIServer(t, true, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != want.Load() {
			writeStatus(w, apierrors.NewUnauthorized("Unauthorized"), nil)
			return
		}
		writePodList(w)
	})
	dir := t.TempDir()
	version := func(name, token string) {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "token"), []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", "first")
	if err := os.Symlink("..data/token", filepath.Join(dir, "token")); err != nil {
		t.Fatal(err)
	}
	kc := kubeconfig(t, srv.URL, srv.caPEM(), func(kc *clientcmdapi.Config) {
		kc.AuthInfos["exporter"] = &clientcmdapi.AuthInfo{TokenFile: filepath.Join(dir, "token")}
	})
	c := newTestChecker(t, kc)
	if v := check(c); v.Reason != provider.ReasonReady {
		t.Fatalf("first token: %s (%s), want Ready", v.Reason, v.Message)
	}
	version("..v2", "second")
	want.Store("Bearer second")
	if v := check(c); v.Reason != provider.ReasonReady {
		t.Fatalf("rotated token: %s (%s), want Ready", v.Reason, v.Message)
	}
}

// TestPlainHTTPServerWithToken: credentials for a plain-http server are
// refused with a clear message instead of an Unauthorized that blames the
// token.
func TestPlainHTTPServerWithToken(t *testing.T) {
	t.Parallel()
	srv := newAPIServer(t, false, func(w http.ResponseWriter, _ *http.Request) { writePodList(w) })
	c := newTestChecker(t, kubeconfig(t, srv.URL, nil, nil))
	v := check(c)
	if v.Reason != provider.ReasonCredentialsUnavailable || !strings.Contains(v.Message, "plain http") {
		t.Errorf("verdict %s (%s), want CredentialsUnavailable about plain http", v.Reason, v.Message)
	}
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("%d requests sent", n)
	}
	if err := CheckFiles(c.cfg); err == nil || !strings.Contains(err.Error(), "plain http") {
		t.Errorf("CheckFiles = %v, want the plain-http error for --config.check", err)
	}
}

// TestReferencedFilesThatWouldHang: the token, CA, client certificate and
// key files a kubeconfig names are read bounded too — client-go would read
// a token file whole and open a CA file blocking — so a named pipe or
// /dev/zero behind one of them gives CredentialsUnavailable naming it.
func TestReferencedFilesThatWouldHang(t *testing.T) {
	t.Parallel()
	srv := newAPIServer(t, true, func(w http.ResponseWriter, _ *http.Request) { writePodList(w) })
	for _, tc := range []struct {
		name string
		set  func(kc *clientcmdapi.Config, path string)
	}{
		{"tokenFile", func(kc *clientcmdapi.Config, p string) {
			kc.AuthInfos["exporter"] = &clientcmdapi.AuthInfo{TokenFile: p}
		}},
		{"certificate-authority", func(kc *clientcmdapi.Config, p string) {
			kc.Clusters["test"].CertificateAuthorityData, kc.Clusters["test"].CertificateAuthority = nil, p
		}},
		{"client-certificate", func(kc *clientcmdapi.Config, p string) {
			kc.AuthInfos["exporter"] = &clientcmdapi.AuthInfo{ClientCertificate: p, ClientKeyData: []byte("k")}
		}},
		{"client-key", func(kc *clientcmdapi.Config, p string) {
			kc.AuthInfos["exporter"] = &clientcmdapi.AuthInfo{ClientCertificateData: []byte("c"), ClientKey: p}
		}},
	} {
		for _, bad := range []struct {
			name string
			make func(path string) error
			want string
		}{
			{"named pipe", func(p string) error { return syscall.Mkfifo(p, 0o600) }, "not a regular file (a named pipe)"},
			{"symlink to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, "not a regular file (a character device)"},
		} {
			t.Run(tc.name+"/"+bad.name, func(t *testing.T) {
				t.Parallel()
				path := filepath.Join(t.TempDir(), "file")
				if err := bad.make(path); err != nil {
					t.Fatal(err)
				}
				c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), func(kc *clientcmdapi.Config) { tc.set(kc, path) }))
				v := check(c)
				if v.Reason != provider.ReasonCredentialsUnavailable || !strings.Contains(v.Message, bad.want) || !strings.Contains(v.Message, path) {
					t.Errorf("verdict %s (%s), want CredentialsUnavailable naming %s and %q", v.Reason, v.Message, path, bad.want)
				}
			})
		}
	}
}

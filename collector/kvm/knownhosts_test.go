package kvm

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// khKeys are the keys the generated files and the checks draw from: a few,
// so that a checked key is often one a line lists.
type khKeys struct {
	keys  []ssh.PublicKey
	ca    ssh.Signer
	certs []*ssh.Certificate // host certificates signed by ca
}

func newKHKeys(t testing.TB) *khKeys {
	t.Helper()
	k := &khKeys{}
	for range 3 {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		k.keys = append(k.keys, s.PublicKey())
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(&ec.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	k.keys = append(k.keys, pub)
	// An RSA key: its line offers three signature algorithms.
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if pub, err = ssh.NewPublicKey(&rk.PublicKey); err != nil {
		t.Fatal(err)
	}
	k.keys = append(k.keys, pub)
	_, caPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if k.ca, err = ssh.NewSignerFromKey(caPriv); err != nil {
		t.Fatal(err)
	}
	for i, key := range k.keys[:2] {
		cert := &ssh.Certificate{Key: key, Serial: uint64(i), CertType: ssh.HostCert, ValidBefore: ssh.CertTimeInfinity,
			ValidPrincipals: []string{"h1.example", "10.0.0.1"}}
		if err := cert.SignCert(rand.Reader, k.ca); err != nil {
			t.Fatal(err)
		}
		k.certs = append(k.certs, cert)
	}
	return k
}

var (
	khHosts = []string{"h1.example", "h2.example", "10.0.0.1", "10.0.0.2", "::1", "fe80::2"}
	khPorts = []string{"22", "2222", "830"}
)

// randomKnownHosts writes a known_hosts file of every kind of line
// OpenSSH's format has: plain names with and without ports, lists,
// wildcards, negations, hashed names, markers, comments and broken lines.
func randomKnownHosts(r *mrand.Rand, k *khKeys) string {
	var b strings.Builder
	name := func() string {
		h, p := khHosts[r.IntN(len(khHosts))], khPorts[r.IntN(len(khPorts))]
		if r.IntN(2) == 0 {
			h = wildcards(r, h)
		}
		if p == "22" && r.IntN(2) == 0 {
			if strings.Contains(h, ":") && r.IntN(2) == 0 {
				return "[" + h + "]"
			}
			return h
		}
		return "[" + h + "]:" + p
	}
	for range r.IntN(12) + 1 {
		key := k.keys[r.IntN(len(k.keys))]
		var pattern string
		switch r.IntN(5) {
		case 0:
			pattern = knownhosts.HashHostname(knownhosts.Normalize(name()))
		case 1:
			pattern = name() + "," + "!" + name()
		case 2:
			pattern = name() + "," + name()
		default:
			pattern = name()
		}
		marker := ""
		switch r.IntN(10) {
		case 0:
			marker, key = "@cert-authority ", k.ca.PublicKey()
		case 1:
			marker = "@revoked "
		case 2:
			marker, key = "@revoked ", k.ca.PublicKey()
		}
		line := marker + pattern + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
		switch r.IntN(12) {
		case 0:
			line = "# " + line
		case 1:
			line = ""
		case 2:
			line = line[:r.IntN(len(line))]
		case 3:
			line = "\t " + line + " comment\r"
		case 4:
			line = "@unknown " + line
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// wildcards puts one to three wildcards into the host name h, each at any
// position, the first and the last included: a * or a ? inserted or in
// the place of a character, or the rest of the name cut and a * put
// after it (whole: "h1.example*", whose * has nothing left to match).
func wildcards(r *mrand.Rand, h string) string {
	for range r.IntN(3) + 1 {
		w := "*?"[r.IntN(2):][:1]
		i := r.IntN(len(h) + 1)
		switch r.IntN(3) {
		case 0:
			h = h[:i] + w + h[i:]
		case 1:
			if i < len(h) {
				h = h[:i] + w + h[i+1:]
			}
		default:
			h = h[:i] + "*"
		}
	}
	return h
}

// knownAlgorithmsByProbe is how the algorithms were found with the
// library: a key no line lists makes its KeyError name every matching
// line.
func knownAlgorithmsByProbe(cb ssh.HostKeyCallback, address string, remote net.Addr) []string {
	probe, _ := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	var ke *knownhosts.KeyError
	if err := cb(address, remote, probe); !errors.As(err, &ke) {
		return nil
	}
	var algos []string
	add := func(xs ...string) {
		for _, x := range xs {
			if !slices.Contains(algos, x) {
				algos = append(algos, x)
			}
		}
	}
	for _, w := range ke.Want {
		if w.Key.Type() == ssh.KeyAlgoRSA {
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
			continue
		}
		add(w.Key.Type())
	}
	return algos
}

// outcome describes a callback's answer so that two can be compared: nil,
// the lines of a KeyError or RevokedError, or that it was another error.
func outcome(err error) string {
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &re):
		return fmt.Sprintf("revoked line %d", re.Revoked.Line)
	case errors.As(err, &ke):
		var lines []string
		for _, w := range ke.Want {
			lines = append(lines, fmt.Sprintf("%d:%s", w.Line, ssh.FingerprintSHA256(w.Key)))
		}
		return "want [" + strings.Join(lines, " ") + "]"
	}
	return "error"
}

// compareKnownHosts checks one file: both parse it or both refuse it, and
// for every address and key both answer alike.
func compareKnownHosts(t *testing.T, path string, k *khKeys, addresses []string) {
	t.Helper()
	lib, libErr := knownhosts.New(path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	db, ourErr := parseKnownHosts(data, path)
	if (libErr == nil) != (ourErr == nil) {
		t.Fatalf("file %q: knownhosts.New: %v; parseKnownHosts: %v", data, libErr, ourErr)
	}
	if libErr != nil {
		return
	}
	ours := db.callback()
	presented := slices.Clone(k.keys)
	presented = append(presented, k.ca.PublicKey())
	for _, c := range k.certs {
		presented = append(presented, c)
	}
	for _, address := range addresses {
		remote := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 22}
		for _, key := range presented {
			want, got := outcome(lib(address, remote, key)), outcome(ours(address, remote, key))
			if want != got {
				t.Fatalf("file %q, address %q, key %s: knownhosts says %s, the index %s", data, address, key.Type(), want, got)
			}
		}
		want := knownAlgorithmsByProbe(lib, address, remote)
		got := db.algorithms(address, remote)
		if !slices.Equal(want, got) {
			t.Fatalf("file %q, address %q: algorithms %v by the library's probe, %v by the index", data, address, want, got)
		}
	}
}

func khAddresses() []string {
	var out []string
	for _, h := range khHosts {
		for _, p := range khPorts {
			out = append(out, net.JoinHostPort(h, p))
		}
	}
	return append(out, "", "h3.example:22", "no-port")
}

// TestKnownHostsAgreesWithLibrary: the indexed known_hosts answers as
// x/crypto's knownhosts for the same file, on a thousand generated files
// of every kind of line (wildcards at every position of a name, revoked
// keys and a revoked authority, RSA keys), for every address and key
// (certificates too).
func TestKnownHostsAgreesWithLibrary(t *testing.T) {
	t.Parallel()
	k := newKHKeys(t)
	r := mrand.New(mrand.NewPCG(1, 2))
	path := filepath.Join(t.TempDir(), "known_hosts")
	addresses := khAddresses()
	for range 1000 {
		if err := os.WriteFile(path, []byte(randomKnownHosts(r, k)), 0o600); err != nil {
			t.Fatal(err)
		}
		compareKnownHosts(t, path, k, addresses)
	}
}

// TestKnownHostsIndexesPlainLines: a file of plain names is held in the
// index, not scanned; a hashed, wildcard or negated line is scanned.
func TestKnownHostsIndexesPlainLines(t *testing.T) {
	t.Parallel()
	k := newKHKeys(t)
	var b strings.Builder
	for i := range 1000 {
		b.WriteString(knownHostsLine(fmt.Sprintf("127.0.%d.%d:22", i/250, i%250+1), k.keys[i%2]))
	}
	b.WriteString("*.example " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.keys[2]))) + "\n")
	db, err := parseKnownHosts([]byte(b.String()), "known_hosts")
	if err != nil {
		t.Fatal(err)
	}
	if len(db.byAddr) != 1000 || len(db.scanned) != 1 {
		t.Fatalf("%d indexed names and %d scanned lines, want 1000 and 1", len(db.byAddr), len(db.scanned))
	}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}
	if err := db.callback()("127.0.1.8:22", remote, k.keys[257%2]); err != nil {
		t.Errorf("the key of line 258: %v", err)
	}
	if err := db.callback()("127.0.1.8:22", remote, k.keys[2]); outcome(err) != "want [258:"+ssh.FingerprintSHA256(k.keys[1])+"]" {
		t.Errorf("another key: %s", outcome(err))
	}
	if err := db.callback()("a.example:22", remote, k.keys[2]); err != nil {
		t.Errorf("a name matched by the wildcard line: %v", err)
	}
}

// FuzzKnownHostsAgreesWithLibrary: for any file, the index and x/crypto's
// knownhosts agree (both refuse it, or answer alike for every address and
// key).
func FuzzKnownHostsAgreesWithLibrary(f *testing.F) {
	k := newKHKeys(f)
	r := mrand.New(mrand.NewPCG(3, 4))
	for range 20 {
		f.Add([]byte(randomKnownHosts(r, k)))
	}
	// What the fuzzer once missed: a * with nothing left to match.
	f.Add([]byte(khLineOf("[10.0.0.1]:2222", k.keys[1]) + khLineOf("[10.0.0.1*]:2222", k.keys[0])))
	f.Add([]byte("@cert-authority h1.example* " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.ca.PublicKey()))) + "\n"))
	path := filepath.Join(f.TempDir(), "known_hosts")
	addresses := khAddresses()
	f.Fuzz(func(t *testing.T, data []byte) {
		if bytes.Count(data, []byte("\n")) > 200 {
			return
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		compareKnownHosts(t, path, k, addresses)
	})
}

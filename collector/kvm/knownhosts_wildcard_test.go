package kvm

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// khLineOf is a known_hosts line of pattern and key.
func khLineOf(pattern string, key ssh.PublicKey) string {
	return pattern + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))) + "\n"
}

// TestKnownHostsTrailingWildcard: the cases of a * with nothing left to
// match, each with the verdict written out (and the library's, which
// must be the same): "[127.0.0.1*]:2222" does not name 127.0.0.1, so
// its host is unknown; with a line of another key for it before, that
// is a key mismatch, not a match; a certificate for h1.example is not
// vouched for by "@cert-authority h1.example*".
func TestKnownHostsTrailingWildcard(t *testing.T) {
	t.Parallel()
	k := newKHKeys(t)
	path := filepath.Join(t.TempDir(), "known_hosts")
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2222}
	for _, c := range []struct {
		name, file, address string
		key                 ssh.PublicKey
		want                string
	}{
		{"unknown", khLineOf("[127.0.0.1*]:2222", k.keys[0]), "127.0.0.1:2222", k.keys[0], "want []"},
		{"mismatch", khLineOf("[127.0.0.1]:2222", k.keys[1]) + khLineOf("[127.0.0.1*]:2222", k.keys[0]), "127.0.0.1:2222", k.keys[0],
			"want [1:" + ssh.FingerprintSHA256(k.keys[1]) + "]"},
		{"one more character", khLineOf("[127.0.0.1*]:2222", k.keys[0]), "127.0.0.10:2222", k.keys[0], "ok"},
		{"in the middle", khLineOf("[127.0*.0.1]:2222", k.keys[0]), "127.0.0.1:2222", k.keys[0], "ok"},
		{"certificate authority", "@cert-authority h1.example* " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.ca.PublicKey()))) + "\n",
			"h1.example:22", k.certs[0], "error"},
		{"certificate authority, one more character", "@cert-authority h1.exampl* " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.ca.PublicKey()))) + "\n",
			"h1.example:22", k.certs[0], "ok"},
	} {
		if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		lib, err := knownhosts.New(path)
		if err != nil {
			t.Fatal(err)
		}
		db, err := parseKnownHosts([]byte(c.file), path)
		if err != nil {
			t.Fatal(err)
		}
		if got := outcome(lib(c.address, remote, c.key)); got != c.want {
			t.Errorf("%s: the library says %s, want %s", c.name, got, c.want)
		}
		if got := outcome(db.callback()(c.address, remote, c.key)); got != c.want {
			t.Errorf("%s: the index says %s, want %s", c.name, got, c.want)
		}
	}
}

// TestKnownHostsWildcardsEverywhere: every pattern of up to four
// characters of 'a', 'b', '*' and '?' (so a wildcard at every position,
// alone or in runs) against every name of up to four characters of 'a'
// and 'b', the empty one too, and on another port: the index matches
// exactly where x/crypto's knownhosts does.
func TestKnownHostsWildcardsEverywhere(t *testing.T) {
	t.Parallel()
	k := newKHKeys(t)
	words := func(alphabet string, longest int) []string {
		out, last := []string{""}, []string{""}
		for range longest {
			var next []string
			for _, w := range last {
				for _, c := range alphabet {
					next = append(next, w+string(c))
				}
			}
			out, last = append(out, next...), next
		}
		return out
	}
	names := words("ab", 4)
	path := filepath.Join(t.TempDir(), "known_hosts")
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}
	for _, p := range words("ab*?", 4)[1:] {
		for _, pattern := range []string{p, "[" + p + "]:2222"} {
			file := khLineOf(pattern, k.keys[0])
			if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
				t.Fatal(err)
			}
			lib, err := knownhosts.New(path)
			if err != nil {
				t.Fatal(err)
			}
			db, err := parseKnownHosts([]byte(file), path)
			if err != nil {
				t.Fatal(err)
			}
			ours := db.callback()
			for _, name := range names {
				for _, port := range []string{"22", "2222"} {
					address := net.JoinHostPort(name, port)
					if want, got := lib(address, remote, k.keys[0]) == nil, ours(address, remote, k.keys[0]) == nil; want != got {
						t.Fatalf("pattern %q, address %q: the library matches: %v, the index: %v", pattern, address, want, got)
					}
				}
			}
		}
	}
}

// TestKnownHostsWildcardCostIsBounded: a pattern of many *s against a long
// name that almost matches it is answered at once (the recursion the
// library uses takes exponential time on it); a guard against a hang,
// not a timing.
func TestKnownHostsWildcardCostIsBounded(t *testing.T) {
	t.Parallel()
	pat := strings.Repeat("*a", 40) + "b"
	if wildcardMatch(pat, strings.Repeat("a", 200)) {
		t.Error("matched a name without its b")
	}
	if !wildcardMatch(pat, strings.Repeat("a", 200)+"b") {
		t.Error("did not match the name with its b")
	}
}

// TestKnownHostsRSAHandshake: a host known by an RSA line whose server
// signs only with rsa-sha2-256, as OpenSSH has since 8.8 (ssh-rsa, SHA-1,
// is off), is asked for a key it can give and passes; a host whose server
// signs only with the old ssh-rsa passes too. The algorithms offered are
// what the handshake needs, not a list the test writes out again.
func TestKnownHostsRSAHandshake(t *testing.T) {
	t.Parallel()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(rk)
	if err != nil {
		t.Fatal(err)
	}
	for _, algos := range [][]string{{ssh.KeyAlgoRSASHA256}, {ssh.KeyAlgoRSASHA512}, {ssh.KeyAlgoRSA}} {
		t.Run(algos[0], func(t *testing.T) {
			t.Parallel()
			only, err := ssh.NewSignerWithAlgorithms(signer.(ssh.AlgorithmSigner), algos)
			if err != nil {
				t.Fatal(err)
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				cfg := &ssh.ServerConfig{NoClientAuth: true}
				cfg.AddHostKey(only)
				if sc, chans, reqs, err := ssh.NewServerConn(c, cfg); err == nil {
					go ssh.DiscardRequests(reqs)
					for ch := range chans {
						_ = ch.Reject(ssh.Prohibited, "no")
					}
					sc.Close()
				}
			}()
			addr := l.Addr().String()
			db, err := parseKnownHosts([]byte(knownHostsLine(addr, signer.PublicKey())), "known_hosts")
			if err != nil {
				t.Fatal(err)
			}
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cfg := &ssh.ClientConfig{User: "u", HostKeyCallback: db.callback(), HostKeyAlgorithms: db.algorithms(addr, conn.RemoteAddr())}
			c, _, _, err := ssh.NewClientConn(conn, addr, cfg)
			if err != nil {
				var ke *knownhosts.KeyError
				t.Fatalf("handshake with host key algorithms %v offered for an RSA line: %v (key error: %v)", cfg.HostKeyAlgorithms, err, errors.As(err, &ke))
			}
			c.Close()
		})
	}
}

package kvm

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"
)

// FuzzSSHMaterial: a private key and a known_hosts file of any content are
// refused with an error naming the file, or parsed, never a panic. Keys
// that need a passphrase are left out: decrypting runs bcrypt's KDF with
// the rounds the file asks for, which the operator's own file sets.
func FuzzSSHMaterial(f *testing.F) {
	dir := f.TempDir()
	keyFile := filepath.Join(dir, "id")
	knownHosts := filepath.Join(dir, "known_hosts")
	signer := writeKey(f, keyFile)
	key, err := os.ReadFile(keyFile)
	if err != nil {
		f.Fatal(err)
	}
	line := knownHostsLine("127.0.0.1:22", signer.PublicKey())
	for _, k := range [][]byte{key, []byte("not a key"), nil, key[:len(key)/2]} {
		for _, kh := range []string{line, "@revoked " + line, "@cert-authority *.example " + line, "|1|bad|hash ssh-ed25519 AAAA\n", "# comment\n\n", "[127.0.0.1]:x ssh-rsa AAAAB3NzaC1yc2E=\n"} {
			f.Add(k, []byte(kh))
		}
	}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}
	f.Fuzz(func(t *testing.T, keyPEM, hosts []byte) {
		if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(knownHosts, hosts, 0o600); err != nil {
			t.Fatal(err)
		}
		set := settings{address: "127.0.0.1:22", user: "u", keyFile: keyFile, knownHostsFile: knownHosts}
		if _, err := loadSigner(set, &signerCache{}); err != nil {
			return
		}
		db, err := loadKnownHosts(set)
		if err != nil {
			return
		}
		_ = db.algorithms(set.address, remote)
		_ = db.callback()(set.address, remote, signer.PublicKey())
		_ = ssh.FingerprintSHA256(signer.PublicKey())
	})
}

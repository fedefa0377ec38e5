package kvm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/egress-proxies/provider_health_exporter/internal/boundedfile"
)

// material is the SSH material of one kvm entry, parsed once per file and
// shared by every host of the entry: a parsed known_hosts is about as large
// as the file, and keeping one per host made the heap grow with hosts ×
// known_hosts lines. A file is parsed again when it changes (another inode,
// size or modification time), so a rotated key or known_hosts is still
// picked up without a reload (docs/configuration.md: "KVM"). Looking a file up costs one
// stat per dial, not a read.
type material struct {
	keys *signerCache

	mu         sync.Mutex
	knownHosts map[string]*stamped[*knownHostsDB]
	signers    map[[2]string]*stamped[ssh.Signer] // key file, passphrase file

	// knownHostsParses and keyLoads count the parses of known_hosts files
	// and the reads of key files, so tests can see that the hosts of an
	// entry share them.
	knownHostsParses atomic.Int64
	keyLoads         atomic.Int64
}

func newMaterial() *material {
	return &material{
		keys:       &signerCache{},
		knownHosts: map[string]*stamped[*knownHostsDB]{},
		signers:    map[[2]string]*stamped[ssh.Signer]{},
	}
}

// knownHosts is the shared parse of set's known_hosts file.
func (m *material) knownHostsDB(set settings) (*knownHostsDB, error) {
	m.mu.Lock()
	e := m.knownHosts[set.knownHostsFile]
	if e == nil {
		e = &stamped[*knownHostsDB]{}
		m.knownHosts[set.knownHostsFile] = e
	}
	m.mu.Unlock()
	return e.get([]string{set.knownHostsFile}, func() (*knownHostsDB, error) {
		m.knownHostsParses.Add(1)
		return loadKnownHosts(set)
	})
}

// signer is the shared signer of set's key and passphrase files.
func (m *material) signer(set settings) (ssh.Signer, error) {
	k := [2]string{set.keyFile, set.passphraseFile}
	m.mu.Lock()
	e := m.signers[k]
	if e == nil {
		e = &stamped[ssh.Signer]{}
		m.signers[k] = e
	}
	m.mu.Unlock()
	return e.get(k[:], func() (ssh.Signer, error) {
		m.keyLoads.Add(1)
		return loadSigner(set, m.keys)
	})
}

// racyWindow is how long after its last modification a file's stamp is not
// trusted; see stamped.get.
const racyWindow = 2 * time.Second

// racyRecheck is how often an untrusted file is read again while it looks
// unchanged: a cold start just after known_hosts was written (a
// configuration management run, then a restart) dials hundreds of hosts a
// second, and reading and hashing the whole file for each of them was a
// tenth of the exporter's CPU (docs/scaling.md: "Cold start").
const racyRecheck = 100 * time.Millisecond

// stamped is a value derived from files, kept with what the files looked
// like before it was derived and a digest of what they held.
type stamped[T any] struct {
	// mu is held while the value is derived, so hosts dialing at once
	// (a cold start) parse a file once between them.
	mu sync.Mutex
	// stamps are nil while the files are not trusted (racyWindow).
	stamps []os.FileInfo
	digest [sha256.Size]byte
	val    T
	ok     bool
	// racy and read are the untrusted files' stats and when they were
	// last read, for racyRecheck.
	racy []os.FileInfo
	read time.Time
}

// get returns the kept value while every file (an empty path is no file)
// looks as it did when the value was derived, and derives it again
// otherwise. The files are stat'ed before load reads them: a change during
// the read makes the next get load again rather than keep stale content. A
// failure is not kept, so a broken or missing file is read again on the next
// dial and its repair is seen at once.
//
// A file modified less than racyWindow ago is not trusted: a file system
// stamps modifications with a coarse clock, so an edit that keeps the size
// and lands in the same tick as the read would otherwise go unseen. Such a
// file is read again, at most every racyRecheck while its stat stays the
// same, until it has been left alone for that long, but parsed again only
// when what it holds changed: every kept connection
// holds the value it was dialed with, and a value per dial would make the
// heap grow with hosts × known_hosts lines again.
func (s *stamped[T]) get(paths []string, load func() (T, error)) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stamps := make([]os.FileInfo, len(paths))
	keep := true
	now := time.Now()
	for i, p := range paths {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			// load reports the problem in its own words.
			keep = false
			break
		}
		if now.Sub(fi.ModTime()) < racyWindow {
			keep = false
		}
		stamps[i] = fi
	}
	if keep && s.ok && s.stamps != nil && sameFiles(s.stamps, stamps) {
		return s.val, nil
	}
	if !keep && s.ok && s.racy != nil && now.Sub(s.read) < racyRecheck && sameFiles(s.racy, stamps) {
		return s.val, nil
	}
	s.racy, s.read = nil, now
	digest, derr := digestFiles(paths)
	if derr == nil && s.ok && digest == s.digest {
		if keep {
			s.stamps = stamps
		} else {
			s.racy = stamps
		}
		return s.val, nil
	}
	v, err := load()
	if err != nil || derr != nil {
		var zero T
		s.val, s.stamps, s.ok = zero, nil, false
		return v, err
	}
	s.val, s.digest, s.ok = v, digest, true
	s.stamps = nil
	if keep {
		s.stamps = stamps
	} else {
		s.racy = stamps
	}
	return v, nil
}

// digestFiles hashes what the files hold, each with its length so that
// contents cannot run into each other.
func digestFiles(paths []string) ([sha256.Size]byte, error) {
	h := sha256.New()
	for _, p := range paths {
		if p == "" {
			h.Write([]byte{0})
			continue
		}
		// The largest cap of the files hashed here: each is read again,
		// with its own cap, by the load it guards.
		b, err := boundedfile.Read(p, boundedfile.KnownHosts)
		if err != nil {
			return [sha256.Size]byte{}, fmt.Errorf("read %s: %w", p, err)
		}
		_ = binary.Write(h, binary.BigEndian, uint64(len(b)))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, nil
}

// sameFiles tells whether two stats describe unchanged files: same inode
// (a rotation by rename makes a new one), size and modification time (an
// edit in place).
func sameFiles(a, b []os.FileInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		switch {
		case a[i] == nil && b[i] == nil:
			continue
		case a[i] == nil || b[i] == nil:
			return false
		case !os.SameFile(a[i], b[i]) || a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()):
			return false
		}
	}
	return true
}

// clientConfig gets the key, the optional passphrase and known_hosts from m;
// hosts is nil when host keys are not verified. Errors name files, never
// their contents.
func clientConfig(set settings, m *material) (cfg *ssh.ClientConfig, hosts *knownHostsDB, err error) {
	signer, err := m.signer(set)
	if err != nil {
		return nil, nil, err
	}
	cfg = &ssh.ClientConfig{User: set.user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}}
	if set.insecure {
		cfg.HostKeyCallback = ssh.InsecureIgnoreHostKey()
		return cfg, nil, nil
	}
	if hosts, err = m.knownHostsDB(set); err != nil {
		return nil, nil, err
	}
	cfg.HostKeyCallback = hosts.callback()
	return cfg, hosts, nil
}

// loadSigner reads and parses the private key, decrypting it with the
// passphrase file when there is one.
func loadSigner(set settings, keys *signerCache) (ssh.Signer, error) {
	pem, err := boundedfile.Read(set.keyFile, boundedfile.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("read private key: %w", err)
	}
	var pass []byte
	if set.passphraseFile != "" {
		if pass, err = boundedfile.Read(set.passphraseFile, boundedfile.Passphrase); err != nil {
			return nil, fmt.Errorf("read passphrase: %w", err)
		}
		pass = bytes.TrimRight(pass, "\r\n")
	}
	return keys.signer(pem, pass, func() (ssh.Signer, error) {
		signer, err := ssh.ParsePrivateKey(pem)
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			if set.passphraseFile == "" {
				return nil, fmt.Errorf("private key %s is encrypted and no passphrase_file is set: %w", set.keyFile, err)
			}
			signer, err = ssh.ParsePrivateKeyWithPassphrase(pem, pass)
		}
		if err != nil {
			return nil, fmt.Errorf("parse private key %s: %w", set.keyFile, err)
		}
		return signer, nil
	})
}

// loadKnownHosts reads and parses known_hosts; a named pipe or an oversized
// file is refused instead of read.
func loadKnownHosts(set settings) (*knownHostsDB, error) {
	data, err := boundedfile.Read(set.knownHostsFile, boundedfile.KnownHosts)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts: %w", err)
	}
	db, err := parseKnownHosts(data, set.knownHostsFile)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts: %w", err)
	}
	return db, nil
}

// signerCache keeps the outcome of parsing a key by the hash of the key file
// and passphrase contents: decrypting an encrypted key (bcrypt KDF) costs
// about half a second of CPU, which every scrape would otherwise pay for
// each unreachable host or wrong passphrase. A rotated or repaired file
// hashes differently and is parsed again.
type signerCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]parsedKey
}

type parsedKey struct {
	signer ssh.Signer
	err    error
}

func (c *signerCache) signer(pem, pass []byte, parse func() (ssh.Signer, error)) (ssh.Signer, error) {
	h := sha256.New()
	h.Write(pem)
	h.Write([]byte{0})
	h.Write(pass)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	c.mu.Lock()
	k, ok := c.m[sum]
	c.mu.Unlock()
	if ok {
		return k.signer, k.err
	}
	k.signer, k.err = parse()
	c.mu.Lock()
	if c.m == nil || len(c.m) >= 64 {
		// Keys replaced by a rotation are never looked up again; keep
		// the map from growing without bound.
		c.m = map[[sha256.Size]byte]parsedKey{}
	}
	c.m[sum] = k
	c.mu.Unlock()
	return k.signer, k.err
}

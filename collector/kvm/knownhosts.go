package kvm

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // OpenSSH hashes known_hosts names with HMAC-SHA1; we only compare.
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// knownHostsDB is one parsed known_hosts file with the lines of plain host
// names indexed by host and port. x/crypto's knownhosts checks a host
// against every line of the file, and the exporter asked it twice per dial
// (the key algorithms to offer, then the key): at a cold start of 5,000
// hosts with a 5,000-line file that was 50 million pattern matches, a
// quarter of the exporter's CPU before the first checks (docs/scaling.md:
// "Cold start"). Here a plain line is found by a map lookup; only the lines
// an index cannot hold are tried one by one: hashed names (each has its own
// salt), wildcards, negations and @cert-authority lines.
//
// It answers as knownhosts.New does for the same file, line for line:
// the same lines match, in file order, with the same *knownhosts.KeyError
// and *knownhosts.RevokedError (TestKnownHostsAgreesWithLibrary compares
// them on generated files; FuzzKnownHostsAgreesWithLibrary on any file).
type knownHostsDB struct {
	lines   []khLine
	byAddr  map[khAddr][]int // lines of plain patterns, by each (host, port) they name
	scanned []int            // every other line, in file order
	revoked map[string]*knownhosts.KnownKey
}

// khAddr is a host and port as known_hosts patterns name them; a pattern
// without a port means 22.
type khAddr struct{ host, port string }

func (a khAddr) String() string {
	h := a.host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return h + ":" + a.port
}

type khPattern struct {
	negate bool
	addr   khAddr
}

type khLine struct {
	cert     bool
	patterns []khPattern // unless hashed
	salt     []byte      // a hashed name: HMAC-SHA1(salt, name) == hash
	hash     []byte
	key      knownhosts.KnownKey
}

func (l *khLine) match(a khAddr) bool {
	if l.hash != nil {
		mac := hmac.New(sha1.New, l.salt)
		mac.Write([]byte(knownhosts.Normalize(a.String())))
		return bytes.Equal(mac.Sum(nil), l.hash)
	}
	matched := false
	for _, p := range l.patterns {
		if p.addr.port != a.port || !wildcardMatch(p.addr.host, a.host) {
			continue
		}
		if p.negate {
			return false
		}
		matched = true
	}
	return matched
}

// wildcardMatch matches a host pattern as x/crypto's knownhosts does,
// whose verdicts the index reproduces (docs/security.md: "Host keys"): *
// is any run of characters, separators included, and ? any one, but once
// the name is used up nothing matches any more, so a trailing * must take
// one character at least: "host*" matches "host1", not "host". OpenSSH
// lets that * match nothing; here, as in the library, the line does not
// match, which is the stricter answer (the host is unknown, never
// trusted by a line that does not name it).
//
// A trailing run of * is written as "?*", and the rest matched by the
// usual glob algorithm, which goes back to the last * only: time
// len(pat)×len(s) at worst, where the library's recursion is exponential
// in the number of *s.
func wildcardMatch(pat, s string) bool {
	if s == "" {
		return pat == ""
	}
	if strings.HasSuffix(pat, "*") {
		pat = strings.TrimRight(pat, "*") + "?*"
	}
	p, i := 0, 0
	star, next := -1, 0 // the last * seen, and where in s its run would end next
	for i < len(s) {
		switch {
		case p < len(pat) && pat[p] == '*':
			star, next = p, i
			p++
		case p < len(pat) && (pat[p] == '?' || pat[p] == s[i]):
			p, i = p+1, i+1
		case star >= 0:
			next++
			p, i = star+1, next
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == '*' {
		p++
	}
	return p == len(pat)
}

// parseKnownHosts reads a known_hosts file's content as knownhosts.New
// reads the file: lines that cannot be parsed are skipped, unless no line
// can, and a line longer than bufio's token limit fails the whole file.
func parseKnownHosts(data []byte, filename string) (*knownHostsDB, error) {
	db := &knownHostsDB{byAddr: map[khAddr][]int{}, revoked: map[string]*knownhosts.KnownKey{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	var firstErr error
	firstErrLine, valid, lineNum := 0, 0, 0
	for sc.Scan() {
		lineNum++
		line := bytes.Trim(sc.Bytes(), " \t")
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if err := db.parseLine(line, filename, lineNum); err != nil {
			if firstErr == nil {
				firstErr, firstErrLine = err, lineNum
			}
			continue
		}
		valid++
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if valid == 0 && firstErr != nil {
		return nil, fmt.Errorf("knownhosts: %s: no valid entries, line %d: %w", filename, firstErrLine, firstErr)
	}
	return db, nil
}

func nextWord(line []byte) (string, []byte) {
	i := bytes.IndexAny(line, "\t ")
	if i == -1 {
		return string(line), nil
	}
	return string(line[:i]), bytes.Trim(line[i:], " \t")
}

func (db *knownHostsDB) parseLine(line []byte, filename string, lineNum int) error {
	marker := ""
	if w, next := nextWord(line); w == "@cert-authority" || w == "@revoked" {
		marker, line = w, next
	}
	pattern, line := nextWord(line)
	if strings.HasPrefix(pattern, "@") {
		return errors.New("knownhosts: unexpected marker")
	}
	if len(line) == 0 {
		return errors.New("knownhosts: missing host pattern")
	}
	wantType, line := nextWord(line)
	if len(line) == 0 {
		return errors.New("knownhosts: missing key type pattern")
	}
	blob, _ := nextWord(line)
	raw, err := base64.StdEncoding.DecodeString(blob)
	if err != nil {
		return fmt.Errorf("knownhosts: %w", err)
	}
	key, err := ssh.ParsePublicKey(raw)
	if err != nil {
		return fmt.Errorf("knownhosts: %w", err)
	}
	if key.Type() != wantType {
		return fmt.Errorf("knownhosts: key type mismatch: found %q, want %q", key.Type(), wantType)
	}
	known := knownhosts.KnownKey{Key: key, Filename: filename, Line: lineNum}
	if marker == "@revoked" {
		db.revoked[plainKeyBlob(key)] = &known
		return nil
	}
	l := khLine{cert: marker == "@cert-authority", key: known}
	if pattern[0] == '|' {
		if l.salt, l.hash, err = decodeHashed(pattern); err != nil {
			return err
		}
	} else if l.patterns, err = parsePatterns(pattern); err != nil {
		return err
	}
	db.add(l)
	return nil
}

// add keeps a line, indexed when it names plain hosts only.
func (db *knownHostsDB) add(l khLine) {
	i := len(db.lines)
	db.lines = append(db.lines, l)
	plain := !l.cert && l.hash == nil
	for _, p := range l.patterns {
		if p.negate || strings.ContainsAny(p.addr.host, "*?") {
			plain = false
		}
	}
	if !plain {
		db.scanned = append(db.scanned, i)
		return
	}
	for _, p := range l.patterns {
		// A line naming one host twice is one match, as in a scan.
		if ix := db.byAddr[p.addr]; len(ix) == 0 || ix[len(ix)-1] != i {
			db.byAddr[p.addr] = append(ix, i)
		}
	}
}

func parsePatterns(pattern string) ([]khPattern, error) {
	var ps []khPattern
	for _, p := range strings.Split(pattern, ",") {
		if p == "" {
			continue
		}
		var hp khPattern
		if p[0] == '!' {
			hp.negate, p = true, p[1:]
		}
		if p == "" {
			return nil, errors.New("knownhosts: negation without following hostname")
		}
		host, port, err := net.SplitHostPort(p)
		switch {
		case err != nil && p[0] == '[':
			return nil, fmt.Errorf("knownhosts: %w", err)
		case err != nil:
			host, port = p, "22"
		}
		hp.addr = khAddr{host, port}
		ps = append(ps, hp)
	}
	return ps, nil
}

func decodeHashed(encoded string) (salt, hash []byte, err error) {
	parts := strings.Split(encoded, "|")
	if len(parts) != 4 {
		return nil, nil, fmt.Errorf("knownhosts: got %d components, want 3", len(parts))
	}
	if salt, err = base64.StdEncoding.DecodeString(parts[2]); err != nil {
		return nil, nil, fmt.Errorf("knownhosts: %w", err)
	}
	if hash, err = base64.StdEncoding.DecodeString(parts[3]); err != nil {
		return nil, nil, fmt.Errorf("knownhosts: %w", err)
	}
	if parts[1] != "1" {
		return nil, nil, fmt.Errorf("knownhosts: got hash type %s, must be '1'", parts[1])
	}
	return salt, hash, nil
}

// plainKeyBlob is the key a certificate certifies, or the key itself.
func plainKeyBlob(key ssh.PublicKey) string {
	if cert, ok := key.(*ssh.Certificate); ok {
		return string(cert.Key.Marshal())
	}
	return string(key.Marshal())
}

// matching calls f with each line matching a, in file order, until f says
// stop: the indexed lines of a merged with the scanned lines that match.
func (db *knownHostsDB) matching(a khAddr, f func(*khLine) (stop bool)) {
	indexed, scanned := db.byAddr[a], db.scanned
	for len(indexed) > 0 || len(scanned) > 0 {
		var i int
		if len(scanned) == 0 || (len(indexed) > 0 && indexed[0] < scanned[0]) {
			i, indexed = indexed[0], indexed[1:]
		} else {
			i, scanned = scanned[0], scanned[1:]
			if !db.lines[i].match(a) {
				continue
			}
		}
		if f(&db.lines[i]) {
			return
		}
	}
}

// addrOf is the host and port a key is checked for: the address dialed
// when there is one (a host keeps its key when its IP changes), else the
// peer's.
func addrOf(address string, remote net.Addr) (khAddr, error) {
	s, what := address, "address"
	if s == "" {
		s, what = remote.String(), "remote"
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return khAddr{}, fmt.Errorf("knownhosts: %s %q: %w", what, s, err)
	}
	return khAddr{host, port}, nil
}

// check is the HostKeyFallback of the callback: nil when a matching line
// has the key, otherwise a *knownhosts.KeyError listing every matching
// line's key (none: the host is unknown).
func (db *knownHostsDB) check(address string, remote net.Addr, key ssh.PublicKey) error {
	if r := db.revoked[plainKeyBlob(key)]; r != nil {
		return &knownhosts.RevokedError{Revoked: *r}
	}
	if _, _, err := net.SplitHostPort(remote.String()); err != nil {
		return fmt.Errorf("knownhosts: remote %q: %w", remote, err)
	}
	a, err := addrOf(address, remote)
	if err != nil {
		return err
	}
	blob := key.Marshal()
	keyErr := &knownhosts.KeyError{}
	found := false
	db.matching(a, func(l *khLine) bool {
		keyErr.Want = append(keyErr.Want, l.key)
		found = bytes.Equal(l.key.Key.Marshal(), blob)
		return found
	})
	if found {
		return nil
	}
	return keyErr
}

func (db *knownHostsDB) isHostAuthority(auth ssh.PublicKey, address string) bool {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	blob := auth.Marshal()
	found := false
	db.matching(khAddr{host, port}, func(l *khLine) bool {
		found = l.cert && bytes.Equal(l.key.Key.Marshal(), blob)
		return found
	})
	return found
}

func (db *knownHostsDB) isRevoked(cert *ssh.Certificate) bool {
	return db.revoked[plainKeyBlob(cert)] != nil || db.revoked[plainKeyBlob(cert.SignatureKey)] != nil
}

// callback is the ssh.HostKeyCallback of the file, as knownhosts.New
// builds it: certificates through ssh.CertChecker, plain keys by check.
func (db *knownHostsDB) callback() ssh.HostKeyCallback {
	cc := &ssh.CertChecker{IsHostAuthority: db.isHostAuthority, IsRevoked: db.isRevoked, HostKeyFallback: db.check}
	return cc.CheckHostKey
}

// algorithms lists the host key algorithms of the keys known for the
// host, so the server is asked for a key we can verify; nil (the
// library's defaults) when the host is unknown, and the handshake then
// fails with HostKeyUnknown. Without it the server may present a key
// type there is no line for, which reads as a mismatch.
func (db *knownHostsDB) algorithms(address string, remote net.Addr) []string {
	a, err := addrOf(address, remote)
	if err != nil {
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
	db.matching(a, func(l *khLine) bool {
		if l.key.Key.Type() == ssh.KeyAlgoRSA {
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		} else {
			add(l.key.Key.Type())
		}
		return false
	})
	return algos
}

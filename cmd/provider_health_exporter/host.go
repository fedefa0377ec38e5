package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// maxHostLen is the longest Host /sd copies into its target groups: a DNS
// name's 253 bytes, a trailing dot and a port (docs/security.md: "Strings,
// labels and pages"). /sd writes the address into every group, so a Host
// of a megabyte would be copied thousands of times.
const maxHostLen = 253 + 1 + len(":65535")

// checkHost tells whether a request's Host may be the address /sd gives:
// host[:port] where host is a DNS name, an IPv4 address or a bracketed
// IPv6 address (no zone), the port 1–65535, all of it at most maxHostLen.
// The error says what is wrong without quoting the Host.
func checkHost(hostport string) error {
	if hostport == "" {
		return errors.New("no host")
	}
	if len(hostport) > maxHostLen {
		return fmt.Errorf("the host is %d bytes, longer than %d", len(hostport), maxHostLen)
	}
	host, port := hostport, ""
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && !strings.HasSuffix(hostport, "]") {
		host, port = hostport[:i], hostport[i+1:]
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || port[0] == '0' || port[0] == '+' {
			return errors.New("the host has no valid port (1-65535) after its last colon")
		}
	}
	if strings.HasPrefix(host, "[") {
		ip := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if !strings.HasSuffix(host, "]") || strings.Contains(ip, "%") || !strings.Contains(ip, ":") || net.ParseIP(ip) == nil {
			return errors.New("the host has a bracketed part that is no IPv6 address")
		}
		return nil
	}
	if strings.Contains(host, ":") {
		return errors.New("the host has an IPv6 address without brackets, or more than one port")
	}
	if !dnsName(host) {
		return errors.New("the host is no DNS name or IPv4 address")
	}
	return nil
}

// dnsName tells whether s is a host name: dot-separated labels of letters,
// digits, hyphens and underscores, each 1–63 bytes and not starting or
// ending with a hyphen, at most 253 bytes, a trailing dot allowed. An IPv4
// address is one.
func dnsName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := range len(label) {
			c := label[i]
			letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
			if !letter && (c < '0' || c > '9') && c != '-' && c != '_' {
				return false
			}
		}
	}
	return true
}

package main

import (
	"net/url"
	"strings"
	"testing"
)

func TestCheckHost(t *testing.T) {
	t.Parallel()
	for host, ok := range map[string]bool{
		"exporter:9877":                 true,
		"exporter.monitoring.svc:9877":  true,
		"provider-health_exporter":      true,
		"exporter.example.":             true,
		"127.0.0.1:9877":                true,
		"[::1]:9877":                    true,
		"[2001:db8::1]":                 true,
		"":                              false,
		"exporter:":                     false,
		"exporter:0":                    false,
		"exporter:65536":                false,
		"exporter:09877":                false,
		"exporter:+9877":                false,
		"::1":                           false,
		"[::1":                          false,
		"[fe80::1%eth0]:9877":           false,
		"[127.0.0.1]:9877":              false,
		"-exporter":                     false,
		"exporter-.example":             false,
		"a..b":                          false,
		"exp orter":                     false,
		"exporter/path":                 false,
		"user@exporter":                 false,
		strings.Repeat("a", 64):         false,
		strings.Repeat("a.", 127) + "a": false, // 255 bytes
		strings.Repeat("a", 1<<20):      false,
		"exporter\xff":                  false,
	} {
		if err := checkHost(host); (err == nil) != ok {
			t.Errorf("checkHost(%.40q) = %v, want ok=%v", host, err, ok)
		}
	}
}

// FuzzSDHost: whatever Host a client sends, checkHost returns, and what
// it accepts is bounded, a URL's host as it is, and needs no escaping in
// the JSON /sd writes.
func FuzzSDHost(f *testing.F) {
	for _, s := range []string{"exporter:9877", "[::1]:9877", "127.0.0.1", "a..b", "[fe80::1%25eth0]:1", "x:65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		err := checkHost(host)
		if err != nil {
			if len(err.Error()) > 200 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
			return
		}
		if len(host) > maxHostLen {
			t.Fatalf("accepted %d bytes", len(host))
		}
		u, perr := url.Parse("http://" + host + "/probe")
		if perr != nil || u.Host != host {
			t.Fatalf("accepted %q, which is no URL host (%v, %q)", host, perr, u)
		}
		for _, c := range []byte(host) {
			if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
				t.Fatalf("accepted %q with byte %#x", host, c)
			}
		}
	})
}

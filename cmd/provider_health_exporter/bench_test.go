package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkScrape measures one /metrics scrape through the real handler with
// instant checkers: the exporter's own overhead per scrape, by target count.
func BenchmarkScrape(b *testing.B) {
	for _, hosts := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("kvm_hosts=%d", hosts), func(b *testing.B) {
			var cfg strings.Builder
			cfg.WriteString("kvm:\n  - name: lab\n    user: u\n    private_key_file: placeholder\n    insecure_ignore_host_key: true\n    hosts:\n")
			for i := range hosts {
				fmt.Fprintf(&cfg, "      - address: 127.0.0.1:%d\n", 10000+i)
				fmt.Fprintf(&cfg, "        name: h%d\n", i)
			}
			_, srv, _ := newTestExporterWith(b, b.TempDir(), cfg.String(), nil, 0)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := http.Get(srv.URL + "/metrics")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}

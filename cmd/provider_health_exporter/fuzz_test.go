package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzProbeQuery: any query string and scrape timeout header sent to /probe
// gets 200 or 400, never a panic or a 5xx.
func FuzzProbeQuery(f *testing.F) {
	for _, q := range []string{"name=lab", "name=lab&target=h", "name=lab&target=nope", "name=g&debug=true", "name=", "",
		"name=lab&name=g", "target=h", "name=%zz", "name=lab&debug=maybe", "name=lab;target=h", "name=\x00", "debug=true&debug=false&name=lab"} {
		for _, h := range []string{"", "10", "1e-10", "0x1p-40", "-1", "NaN"} {
			f.Add(q, h)
		}
	}
	x, srv, _ := newTestExporterWith(f, f.TempDir(), "gcp:\n  - name: g\n    project: p\nkvm:\n  - name: lab\n    user: u\n    private_key_file: placeholder\n    insecure_ignore_host_key: true\n    hosts:\n      - address: 127.0.0.1:1\n        name: h\n", nil, 0)
	srv.Close()
	h := x.handler()
	f.Fuzz(func(t *testing.T, query, header string) {
		if strings.ContainsAny(query, " #\r\n") {
			return // not a query string a client can send
		}
		req, err := http.NewRequest(http.MethodGet, "http://x/probe?"+query, nil)
		if err != nil {
			return
		}
		if header != "" {
			req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("GET /probe?%s (header %q): %d %s", query, header, rec.Code, rec.Body)
		}
	})
}

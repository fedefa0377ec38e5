package toykind

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestToyKindBoundsHeaders: the toy kind, written by the recipe alone
// (no call of provider.BoundHeaders), refuses an answer with 1 MiB of
// headers, over provider.MaxHeaderBytes, as BadResponse: its
// provider.BoundedTransport bounds them. 32 KiB of headers pass.
func TestToyKindBoundsHeaders(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 128 // 1 MiB
		if r.URL.Path == "/small" {
			n = 4
		}
		for i := range n {
			w.Header().Set(fmt.Sprintf("X-Padding-%d", i), strings.Repeat("h", 8<<10))
		}
	}))
	t.Cleanup(srv.Close)
	for path, want := range map[string]provider.Reason{"/small": provider.ReasonReady, "/": provider.ReasonBadResponse} {
		c, err := New(&Entry{Name: "t", URL: srv.URL + path}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		v := c.Check(context.Background(), slog.New(slog.DiscardHandler), "")
		if v.Reason != want {
			t.Errorf("%s: %s (%s), want %s", path, v.Reason, v.Message, want)
		}
		if want == provider.ReasonBadResponse && !strings.Contains(v.Message, "limit of 64 KiB") {
			t.Errorf("%s: the message %q does not name the limit", path, v.Message)
		}
	}
}

// TestToyKindCapacityHeaders: the answer's X-Toy-Capacity and X-Toy-Domain
// give the verdict its capacity and domains; a header that does not
// parse is a BadResponse naming it, never a capacity made up.
func TestToyKindCapacityHeaders(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/good":
			w.Header().Set("X-Toy-Capacity", "5")
			w.Header().Add("X-Toy-Domain", "a 3 2 -2")
			w.Header().Add("X-Toy-Domain", "b 2 0 -")
		case "/badcap":
			w.Header().Set("X-Toy-Capacity", "-1")
		case "/baddomain":
			w.Header().Set("X-Toy-Domain", "a 3 2")
		}
	}))
	t.Cleanup(srv.Close)
	check := func(path string) provider.Verdict {
		c, err := New(&Entry{Name: "t", URL: srv.URL + path}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return c.Check(context.Background(), slog.New(slog.DiscardHandler), "")
	}
	v := check("/good")
	want := []provider.Domain{{Name: "a", Capacity: 3, Proxies: 2, AfterLoss: -2, HasAfterLoss: true}, {Name: "b", Capacity: 2}}
	if v.Reason != provider.ReasonReady || v.Capacity != (provider.Capacity{Known: true, Proxies: 5, Binding: "toy"}) || fmt.Sprint(v.Domains) != fmt.Sprint(want) {
		t.Errorf("/good: %+v", v)
	}
	for path, header := range map[string]string{"/badcap": "X-Toy-Capacity", "/baddomain": "X-Toy-Domain"} {
		if v := check(path); v.Reason != provider.ReasonBadResponse || !strings.Contains(v.Message, header) || v.Capacity.Known || v.Domains != nil {
			t.Errorf("%s: %+v, want BadResponse naming %s", path, v, header)
		}
	}
}

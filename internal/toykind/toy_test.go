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

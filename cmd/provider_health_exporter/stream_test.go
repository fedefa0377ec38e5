package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestStreamedAnswersMatchWholeEncoding: /api/v1/status and /sd, written
// entry by entry and target by target, are byte for byte what encoding
// the whole answer at once gives, before any check, after the checks (with
// details, transitions, not ready and down targets) and with no entries.
func TestStreamedAnswersMatchWholeEncoding(t *testing.T) {
	t.Parallel()
	x, srv, _ := newTestExporter(t, fleetPageConfig, fleetPageBehaviours(), 0)
	empty, _, _ := newTestExporter(t, "kvm: []\n", nil, 0)
	check := func(x *exporter, when string) {
		t.Helper()
		results, err := x.engine.Status("")
		if err != nil {
			t.Fatal(err)
		}
		whole := []statusProvider{}
		groups := []sdGroup{}
		for _, p := range results {
			sp := statusProvider{statusEntry: newStatusEntry(p), Targets: []statusTarget{}}
			for _, tr := range p.Targets {
				sp.Targets = append(sp.Targets, newStatusTarget(p, tr))
				labels := map[string]string{"__metrics_path__": "/prefix/probe", "__scheme__": "https", "__param_name": p.Name,
					"provider": p.Kind, "name": p.Name, "target": tr.Target.Name}
				if x.multiTarget(p.Kind) {
					labels["__param_target"] = tr.Target.Name
				}
				groups = append(groups, sdGroup{Targets: []string{"exporter:9877"}, Labels: labels})
			}
			whole = append(whole, sp)
		}
		for _, tc := range []struct {
			name  string
			whole any
			write func(*bytes.Buffer) error
		}{
			{"/api/v1/status", map[string]any{"providers": whole, "reasons": statusReasons(results, x.kinds)}, func(b *bytes.Buffer) error { return writeStatusJSON(b, results, x.kinds) }},
			{"/sd", groups, func(b *bytes.Buffer) error { return x.writeSD(b, results, "https", "exporter:9877", "/prefix") }},
		} {
			var want, got bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetIndent("", "  ")
			if err := enc.Encode(tc.whole); err != nil {
				t.Fatal(err)
			}
			if err := tc.write(&got); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Errorf("%s %s: streamed\n%s\nwant\n%s", tc.name, when, got.String(), want.String())
			}
		}
	}
	check(x, "before any check")
	check(empty, "without entries")
	if code, body := get(t, http.DefaultClient, srv.URL+"/?refresh=true", nil); code != http.StatusOK {
		t.Fatalf("refresh: %d %.200s", code, body)
	}
	check(x, "after the checks")
}

// failAfter accepts n bytes, then fails every write.
type failAfter struct {
	n, writes int
}

var errGone = errors.New("client gone")

func (f *failAfter) Write(b []byte) (int, error) {
	f.writes++
	if len(b) > f.n {
		f.n = 0
		return 0, errGone
	}
	f.n -= len(b)
	return len(b), nil
}

// TestStreamingStopsAtFirstFailedWrite: a client gone (or past its write
// deadline) ends the answer at the write that failed; nothing more is
// shaped or written.
func TestStreamingStopsAtFirstFailedWrite(t *testing.T) {
	t.Parallel()
	x, srv, _ := newTestExporter(t, fleetPageConfig, fleetPageBehaviours(), 0)
	if code, _ := get(t, http.DefaultClient, srv.URL+"/?refresh=true", nil); code != http.StatusOK {
		t.Fatal(code)
	}
	results, err := x.engine.Status("")
	if err != nil {
		t.Fatal(err)
	}
	f := &failAfter{n: 100}
	if err := writeStatusJSON(f, results, x.kinds); !errors.Is(err, errGone) {
		t.Errorf("writeStatusJSON: %v, want the write's error", err)
	}
	// The head, and the failing write of the first target or entry.
	if f.writes > 6 {
		t.Errorf("%d writes, want none after the one that failed", f.writes)
	}
	f = &failAfter{n: 100}
	if err := x.writeSD(f, results, "http", "e:1", ""); !errors.Is(err, errGone) || f.writes > 4 {
		t.Errorf("writeSD: %v after %d writes, want the write's error and no more writes", err, f.writes)
	}
}

func TestEchoAndEscapeText(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("n", 60_000)
	if got := provider.Echo(long); got != `"`+long[:provider.MaxEcho]+`"… (60000 bytes)` {
		t.Errorf("Echo of 60 KB: %.100q", got)
	}
	if got := provider.Echo("a\x1bb\x00"); got != `"a\x1bb\x00"` {
		t.Errorf("Echo: %q", got)
	}
	// Cut on a rune's start: no half rune.
	if got := provider.Echo(strings.Repeat("n", provider.MaxEcho-1) + "ä" + long); !strings.HasPrefix(got, `"`+strings.Repeat("n", provider.MaxEcho-1)+`"…`) {
		t.Errorf("Echo across a rune: %.100q", got)
	}
	for in, want := range map[string]string{
		"plain \"quoted\" text": "plain \"quoted\" text",
		"\x1b[31mred\x1b[0m":    `\x1b[31mred\x1b[0m`,
		"nul\x00 and\nnewline":  `nul\x00 and\nnewline`,
		"bad \xff byte":         `bad \xff byte`,
		"ünïcode":               "ünïcode",
	} {
		if got := provider.EscapeText(in); got != want {
			t.Errorf("EscapeText(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTextAnswersEscaped: a provider's ESC and NUL bytes reach the debug
// probe's verdict line escaped as the log escapes them, and an unknown
// name= of 60 KB comes back from /probe and /api/v1/status as a short
// escaped prefix.
func TestTextAnswersEscaped(t *testing.T) {
	t.Parallel()
	behaviours := map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"crawl-prod": func(_ context.Context, logger *slog.Logger, _ string) provider.Verdict {
			logger.Debug("answer", "body", "\x1b]0;owned\x07\x00")
			return provider.Verdict{Reason: provider.ReasonUnknown, Message: "clear\x1b[2J\x00screen \xff"}
		},
	}
	_, srv, _ := newTestExporter(t, baseConfig, behaviours, 0)
	code, body := get(t, http.DefaultClient, srv.URL+"/probe?name=crawl-prod&debug=true", nil)
	if code != http.StatusOK {
		t.Fatalf("debug probe: %d %.300s", code, body)
	}
	if strings.ContainsAny(body, "\x1b\x00\x07") || !utf8.ValidString(body) {
		t.Errorf("the debug answer carries raw control bytes:\n%q", body)
	}
	for _, want := range []string{`Verdict for gcp/crawl-prod/compute: Unknown (up=false ready=false) in `, "s: clear\\x1b[2J\\x00screen \uFFFD\n", `body="\x1b]0;owned\a\x00"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the debug answer lacks %q:\n%s", want, body)
		}
	}
	long := "\x1b" + strings.Repeat("n", 60_000)
	for _, path := range []string{"/probe?name=", "/probe?debug=true&name=", "/api/v1/status?name=", "/probe?name=crawl-prod&target="} {
		code, body := get(t, http.DefaultClient, srv.URL+path+url.QueryEscape(long), nil)
		if code != http.StatusBadRequest || len(body) > 300 || strings.Contains(body, "\x1b") || !strings.Contains(body, `"\x1bnnn`) || !strings.Contains(body, "… (60001 bytes)") {
			t.Errorf("%s<60 KB>: %d, %d bytes %.300q; want a 400 with a short escaped prefix", path, code, len(body), body)
		}
	}
	code, body = get(t, http.DefaultClient, srv.URL+"/metrics", map[string]string{engine.ScrapeTimeoutHeader: strings.Repeat("9", 10_000) + "x"})
	if code != http.StatusBadRequest || len(body) > 300 {
		t.Errorf("a 10 KB scrape timeout header: %d, %d bytes %.300q; want a short 400", code, len(body), body)
	}
}

// deadlineRecorder is a ResponseWriter that records the write deadlines
// set through http.ResponseController, and fails writes when told.
type deadlineRecorder struct {
	http.ResponseWriter
	deadlines []time.Time
	fail      bool
}

func (d *deadlineRecorder) Write(b []byte) (int, error) {
	if d.fail {
		return 0, errGone
	}
	return len(b), nil
}

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	d.deadlines = append(d.deadlines, t)
	return nil
}

// TestStreamWriterMovesTheDeadline: a streamed answer's write deadline
// moves writeGrace past each piece the client takes, once it is more than
// a second later than the one in force, never past maxStreamTime after the
// request, and not after a failed write.
func TestStreamWriterMovesTheDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		d := &deadlineRecorder{ResponseWriter: httptest.NewRecorder()}
		begin := time.Now()
		sw := streaming(d, begin, 20*time.Second)
		write := func() {
			t.Helper()
			if _, err := sw.Write([]byte("piece")); err != nil {
				t.Fatal(err)
			}
		}
		write() // now+10s is before the first deadline: nothing to move
		time.Sleep(15 * time.Second)
		write() // begin+25s
		time.Sleep(500 * time.Millisecond)
		write() // half a second later: not worth a call
		time.Sleep(6 * time.Minute)
		write() // capped at begin+maxStreamTime
		d.fail = true
		time.Sleep(time.Minute)
		if _, err := sw.Write([]byte("piece")); !errors.Is(err, errGone) {
			t.Errorf("a failed write: %v", err)
		}
		want := []time.Time{begin.Add(25 * time.Second), begin.Add(maxStreamTime)}
		if !slices.EqualFunc(d.deadlines, want, time.Time.Equal) {
			t.Errorf("deadlines %v, want %v", d.deadlines, want)
		}
	})
}

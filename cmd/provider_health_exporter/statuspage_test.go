package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/egress-proxies/provider_health_exporter/collector/gcp"
	"github.com/egress-proxies/provider_health_exporter/collector/kubernetes"
	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// fleetPageConfig has an entry per kind and a kvm entry of four hosts, so
// that one entry's hosts fall into several sections.
const fleetPageConfig = baseConfig + `
  - name: rack
    min_pool_available: 1GiB
    user: proxyops
    private_key_file: placeholder
    known_hosts_file: placeholder
    hosts:
      - {address: "127.0.0.1:3001", name: r1}
      - {address: "127.0.0.1:3002", name: r2}
      - {address: "127.0.0.1:3003", name: r3}
      - {address: "127.0.0.1:3004", name: r4}
`

// fleetPageBehaviours: crawl-prod is not ready (APIDisabled), lab's beelink
// is down and nuc ready, rack has two hosts down, one not ready (PoolFull)
// and one ready; prod-cluster is ready.
func fleetPageBehaviours() map[string]func(context.Context, *slog.Logger, string) provider.Verdict {
	byTarget := func(m map[string]provider.Reason) func(context.Context, *slog.Logger, string) provider.Verdict {
		return func(_ context.Context, _ *slog.Logger, target string) provider.Verdict {
			r := m[target]
			return provider.Verdict{Reason: r, Message: fmt.Sprintf("%s says %s", target, r)}
		}
	}
	return map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"crawl-prod": fixed(gcp.ReasonAPIDisabled, "Compute Engine API has not been used in project crawl-prod-123"),
		"lab":        byTarget(map[string]provider.Reason{"beelink": provider.ReasonUnreachable, "nuc": provider.ReasonReady}),
		"rack": byTarget(map[string]provider.Reason{"r1": provider.ReasonUnreachable, "r2": kvm.ReasonPoolFull,
			"r3": provider.ReasonReady, "r4": kvm.ReasonHostKeyMismatch}),
	}
}

// shownRow is a target row of the page: its section, state class and
// cells.
type shownRow struct {
	section, class, id string // id: name/target
	member             bool
	cells              []string
}

// pageTables reads the status page's summary rows (by data-provider, ""
// for the total) and its target rows, in page order, and the entry
// headings ("section name").
func pageTables(t *testing.T, page string) (summary map[string]*html.Node, rows []shownRow, headings []string) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	summary = map[string]*html.Node{}
	var walk func(n *html.Node, section string, inSummary bool)
	walk = func(n *html.Node, section string, inSummary bool) {
		if n.Type == html.ElementNode {
			switch {
			case n.Data == "table" && attr(n, "id") == "summary":
				inSummary = true
			case n.Data == "tbody" && !inSummary:
				section = attr(n, "class")
			case n.Data == "tr" && inSummary && attr(n, "class") != "":
				summary[attr(n, "data-provider")] = n
			case n.Data == "tr" && attr(n, "class") == "entry":
				headings = append(headings, section+" "+attr(n, "data-entry"))
			case n.Data == "tr" && hasAttr(n, "data-target"):
				r := shownRow{section: section, class: attr(n, "class"), id: attr(n, "data-name") + "/" + attr(n, "data-target"), member: hasAttr(n, "data-member")}
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if c.Type == html.ElementNode && c.Data == "td" {
						r.cells = append(r.cells, strings.TrimSpace(text(c)))
					}
				}
				rows = append(rows, r)
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, section, inSummary)
		}
	}
	walk(doc, "", false)
	return summary, rows, headings
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasAttr(n *html.Node, key string) bool {
	return slices.ContainsFunc(n.Attr, func(a html.Attribute) bool { return a.Key == key })
}

func text(n *html.Node) string {
	if n.Type == html.TextNode {
		return n.Data
	}
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		b.WriteString(text(c))
	}
	return b.String()
}

// findClass is the first element under n whose class list has class.
func findClass(n *html.Node, class string) *html.Node {
	if n.Type == html.ElementNode && slices.Contains(strings.Fields(attr(n, "class")), class) {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := findClass(c, class); f != nil {
			return f
		}
	}
	return nil
}

// summaryCounts reads one summary row: the counts by column class, and
// the reasons of the not-ready and down columns.
func summaryCounts(t *testing.T, tr *html.Node) (counts map[string]int, notReadyBy, downBy map[string]int) {
	t.Helper()
	counts = map[string]int{}
	for _, col := range []string{"entries", "targets", "ready", "notready", "down", "unchecked"} {
		td := findClass(tr, col)
		if td == nil {
			t.Fatalf("summary row %q has no %s cell", attr(tr, "data-provider"), col)
		}
		n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(text(td)), ",", ""))
		if err != nil {
			t.Fatalf("summary row %q, %s: %v", attr(tr, "data-provider"), col, err)
		}
		counts[col] = n
	}
	by := func(class string) map[string]int {
		out := map[string]int{}
		var walk func(n *html.Node)
		walk = func(n *html.Node) {
			if n.Type == html.ElementNode && attr(n, "class") == "reason" {
				c, err := strconv.Atoi(attr(n, "data-count"))
				if err != nil {
					t.Fatalf("data-count %q: %v", attr(n, "data-count"), err)
				}
				out[attr(n, "data-reason")] = c
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				walk(c)
			}
		}
		walk(findClass(tr, class))
		return out
	}
	return counts, by("notready-by"), by("down-by")
}

// TestStatusPageFleetView: the page has a summary per provider that
// counts what /api/v1/status says, the targets in sections by state with
// the ones that are not ready first, and a kvm entry's hosts under a
// heading of the entry in each section.
func TestStatusPageFleetView(t *testing.T) {
	t.Parallel()
	x, srv, _ := newTestExporter(t, fleetPageConfig, fleetPageBehaviours(), 0)

	// Before any check: everything in the never-checked section, and the
	// summary says so.
	_, page := get(t, http.DefaultClient, srv.URL+"/", nil)
	summary, rows, _ := pageTables(t, page)
	if len(rows) != 8 {
		t.Fatalf("%d rows before any check, want 8", len(rows))
	}
	for _, r := range rows {
		if r.section != stateUnchecked || r.class != stateUnchecked {
			t.Errorf("%s before any check: section %q class %q, want unchecked", r.id, r.section, r.class)
		}
	}
	if c, _, _ := summaryCounts(t, summary[""]); c["unchecked"] != 8 || c["targets"] != 8 || c["entries"] != 4 {
		t.Errorf("total before any check: %v, want 8 targets unchecked in 4 entries", c)
	}
	if n := checksTotal(t, x); n != 0 {
		t.Errorf("loading the page made %d checks", n)
	}

	if code, body := get(t, http.DefaultClient, srv.URL+"/?refresh=true", nil); code != http.StatusOK {
		t.Fatalf("refresh: %d %s", code, body)
	}
	if n := checksTotal(t, x); n != 8 {
		t.Errorf("the refresh made %d checks, want 8 (one per target)", n)
	}
	_, page = get(t, http.DefaultClient, srv.URL+"/", nil)
	summary, rows, headings := pageTables(t, page)

	// Sections in order, and within them the configuration's order.
	var got []string
	for _, r := range rows {
		got = append(got, r.section+" "+r.id)
		if r.class != r.section {
			t.Errorf("%s: class %q in section %q", r.id, r.class, r.section)
		}
		if r.member != (r.cells[0] == kvm.Name) {
			t.Errorf("%s: member of an entry heading %v, want it for kvm rows only", r.id, r.member)
		}
	}
	want := []string{
		"notready crawl-prod/compute", "notready rack/r2",
		"down lab/beelink", "down rack/r1", "down rack/r4",
		"ready prod-cluster/apiserver", "ready lab/nuc", "ready rack/r3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rows:\n%q\nwant\n%q", got, want)
	}
	if want := []string{"notready rack", "down lab", "down rack", "ready lab", "ready rack"}; !slices.Equal(headings, want) {
		t.Errorf("entry headings %q, want %q", headings, want)
	}
	if !strings.Contains(page, ">rack</a>: 2 of 4 targets down (HostKeyMismatch 1, Unreachable 1)</th>") {
		t.Errorf("the heading of rack's down hosts does not count them by reason:\n%s", page)
	}

	// The summary counts what /api/v1/status says.
	st := getStatus(t, srv.URL)
	type tally struct {
		counts             map[string]int
		notReadyBy, downBy map[string]int
	}
	wantSum := map[string]*tally{}
	for _, key := range []string{"", kubernetes.Name, gcp.Name, kvm.Name} {
		wantSum[key] = &tally{counts: map[string]int{"entries": 0, "targets": 0, "ready": 0, "notready": 0, "down": 0, "unchecked": 0}, notReadyBy: map[string]int{}, downBy: map[string]int{}}
	}
	for _, p := range st {
		for _, key := range []string{"", p.Provider} {
			w := wantSum[key]
			w.counts["entries"]++
			for _, tg := range p.Targets {
				w.counts["targets"]++
				// Not ready is every target whose ready is 0, down ones
				// (up 0) included, as the metrics count them.
				switch {
				case tg.Ready:
					w.counts["ready"]++
				case tg.Up:
					w.counts["notready"]++
					w.notReadyBy[string(tg.Reason)]++
				default:
					w.counts["notready"]++
					w.counts["down"]++
					w.downBy[string(tg.Reason)]++
				}
			}
		}
	}
	for key, w := range wantSum {
		tr := summary[key]
		if tr == nil {
			t.Errorf("no summary row for %q", key)
			continue
		}
		c, nr, dn := summaryCounts(t, tr)
		if fmt.Sprint(c, nr, dn) != fmt.Sprint(w.counts, w.notReadyBy, w.downBy) {
			t.Errorf("summary of %q: %v %v %v; /api/v1/status says %v %v %v", key, c, nr, dn, w.counts, w.notReadyBy, w.downBy)
		}
	}
	if c, _, _ := summaryCounts(t, summary[kvm.Name]); c["down"] != 3 || c["notready"] != 4 || c["ready"] != 2 {
		t.Errorf("kvm summary %v, want 4 not ready, 3 of them down, 2 ready", c)
	}
}

// TestStatusPageFilters: each filter shows exactly the targets it
// selects, the summary still counts all of them, a refresh keeps the
// filter, and a filter that can match nothing the exporter knows is a 400
// naming the parameter, before anything is checked.
func TestStatusPageFilters(t *testing.T) {
	t.Parallel()
	x, srv, _ := newTestExporter(t, fleetPageConfig, fleetPageBehaviours(), 0)
	if code, _ := get(t, http.DefaultClient, srv.URL+"/?refresh=true", nil); code != http.StatusOK {
		t.Fatalf("refresh: %d", code)
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"crawl-prod/compute", "rack/r2", "lab/beelink", "rack/r1", "rack/r4", "prod-cluster/apiserver", "lab/nuc", "rack/r3"}},
		{"provider=kvm", []string{"rack/r2", "lab/beelink", "rack/r1", "rack/r4", "lab/nuc", "rack/r3"}},
		{"provider=gcp", []string{"crawl-prod/compute"}},
		{"name=rack", []string{"rack/r2", "rack/r1", "rack/r4", "rack/r3"}},
		{"reason=Unreachable", []string{"lab/beelink", "rack/r1"}},
		{"reason=Ready", []string{"prod-cluster/apiserver", "lab/nuc", "rack/r3"}},
		{"state=down", []string{"lab/beelink", "rack/r1", "rack/r4"}},
		// Not ready: ready 0, down included.
		{"state=notready", []string{"crawl-prod/compute", "rack/r2", "lab/beelink", "rack/r1", "rack/r4"}},
		{"provider=kvm&state=notready", []string{"rack/r2", "lab/beelink", "rack/r1", "rack/r4"}},
		{"name=lab&reason=Unreachable", []string{"lab/beelink"}},
		{"provider=gcp&name=rack", nil},
		{"reason=Timeout", nil}, // a reason no target has now
		// A reason of one kind only, not the last in the table: known.
		{"reason=Unschedulable", nil},
		{"state=unchecked", nil}, // every target was checked
		{"provider=&name=&reason=&state=", // an empty form
			[]string{"crawl-prod/compute", "rack/r2", "lab/beelink", "rack/r1", "rack/r4", "prod-cluster/apiserver", "lab/nuc", "rack/r3"}},
	} {
		code, page := get(t, http.DefaultClient, srv.URL+"/?"+tc.query, nil)
		if code != http.StatusOK {
			t.Errorf("?%s: status %d", tc.query, code)
			continue
		}
		summary, rows, _ := pageTables(t, page)
		var got []string
		for _, r := range rows {
			got = append(got, r.id)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("?%s: rows %q, want %q", tc.query, got, tc.want)
		}
		if c, _, _ := summaryCounts(t, summary[""]); c["targets"] != 8 {
			t.Errorf("?%s: the summary counts %d targets, want all 8", tc.query, c["targets"])
		}
		if len(tc.want) == 0 && !strings.Contains(page, "no target matches the filter") {
			t.Errorf("?%s: an empty table does not say that nothing matches", tc.query)
		}
	}

	// A refresh runs every check and keeps the filter.
	before := checksTotal(t, x)
	code, page := get(t, http.DefaultClient, srv.URL+"/?provider=kvm&reason=Unreachable&refresh=true", nil)
	if code != http.StatusOK || checksTotal(t, x) != before+8 {
		t.Errorf("a filtered refresh: status %d, %d checks, want 200 and 8", code, checksTotal(t, x)-before)
	}
	for _, hidden := range []string{`<input type="hidden" name="provider" value="kvm">`, `<input type="hidden" name="reason" value="Unreachable">`} {
		if !strings.Contains(page, hidden) {
			t.Errorf("the refresh form does not keep the filter: no %s", hidden)
		}
	}

	before = checksTotal(t, x)
	long := strings.Repeat("x", 10000)
	for _, tc := range []struct{ query, want string }{
		{"provider=openstack", `provider="openstack": not a kind of provider; want one of kubernetes, gcp, kvm`},
		{"name=nope", `name="nope": no entry of that name is configured`},
		{"reason=Sleepy", `reason="Sleepy": no kind of provider has that reason`},
		{"state=sideways", `state="sideways": want one of notready, down, unchecked, ready`},
		{"name=nope&refresh=true", `name="nope"`},
		{"provider=" + long, `provider="` + long[:provider.MaxEcho] + `"… (10000 bytes)`},
		{"name=%1b%5b2J%00" + long, `name="\x1b[2J\x00` + long[:provider.MaxEcho-5] + `"… (10005 bytes)`},
	} {
		code, body := get(t, http.DefaultClient, srv.URL+"/?"+tc.query, nil)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("?%.40s: %d %.200q, want 400 with %.200q", tc.query, code, body, tc.want)
		}
		if len(body) > 1000 {
			t.Errorf("?%.40s: the error repeats %d bytes of the query", tc.query, len(body))
		}
	}
	if n := checksTotal(t, x); n != before {
		t.Errorf("refused filters ran %d checks, want none", n-before)
	}
}

func TestThousandsAndFilterLink(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 12345: "12,345", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
	for _, tc := range []struct {
		kv   []string
		want string
	}{
		{nil, ""},
		{[]string{"provider", ""}, ""},
		{[]string{"provider", "kvm", "reason", ""}, "?provider=kvm"},
		{[]string{"name", "a b&c", "state", "down"}, "?" + url.Values{"name": {"a b&c"}, "state": {"down"}}.Encode()},
	} {
		if got := filterLink(tc.kv...); got != tc.want {
			t.Errorf("filterLink(%q) = %q, want %q", tc.kv, got, tc.want)
		}
	}
}

// BenchmarkStatusPage renders the status page of a kvm entry of 1,000
// hosts, 10 of them not ready, as the exporter serves it: the server's part
// of the page's load time (docs/configuration.md: "HTTP endpoints").
func BenchmarkStatusPage(b *testing.B) {
	var cfg strings.Builder
	cfg.WriteString("kvm:\n  - name: fleet\n    user: proxyops\n    private_key_file: placeholder\n    known_hosts_file: placeholder\n    hosts:\n")
	for i := range 1000 {
		fmt.Fprintf(&cfg, "      - {address: \"127.0.0.1:%d\", name: host-%04d}\n", 10000+i, i+1)
	}
	x, srv, _ := newTestExporterWith(b, b.TempDir(), cfg.String(), map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"fleet": func(_ context.Context, _ *slog.Logger, target string) provider.Verdict {
			if strings.HasSuffix(target, "0") && target < "host-0100" {
				return provider.Verdict{Reason: provider.ReasonUnreachable, Message: "tcp: dial tcp 127.0.0.1:10000: connect: connection refused"}
			}
			return provider.Verdict{Reason: provider.ReasonReady}
		},
	}, 0)
	srv.Close()
	h := x.handler()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/?refresh=true", nil))
	b.ReportAllocs()
	var size int
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
		size = w.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/page")
}

// TestStatusPageShowsDetails: a target's details, what /api/v1/status
// has under "details" (here a Kubernetes entry's pod_template, namespace
// and last dry run), are on its row of the page under the message,
// escaped; a row without details has none.
func TestStatusPageShowsDetails(t *testing.T) {
	t.Parallel()
	facts := &kubernetes.Facts{Namespace: "proxies", PodTemplate: "/etc/provider_health/proxy-pod.yaml",
		DryRun: &kubernetes.DryRunOutcome{Time: time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC), Reason: provider.ReasonReady,
			Message: `dry-run create of pod_template in namespace proxies admitted <script>alert(1)</script>`}}
	behaviours := map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"prod-cluster": func(context.Context, *slog.Logger, string) provider.Verdict {
			return provider.Verdict{Reason: provider.ReasonReady, Message: "listed 3 pods", Facts: facts}
		},
		// A host never reached: no pool state, no libvirt version.
		"lab": func(context.Context, *slog.Logger, string) provider.Verdict {
			return provider.Verdict{Reason: provider.ReasonUnreachable, Message: "connection refused", Facts: &kvm.Facts{User: "proxyops", Pool: "default"}}
		},
	}
	_, srv, _ := newTestExporter(t, baseConfig, behaviours, 0)
	if code, body := get(t, http.DefaultClient, srv.URL+"/?refresh=true", nil); code != http.StatusOK {
		t.Fatalf("refresh: %d %s", code, body)
	}
	// The page shows the details with a value; /api/v1/status has every
	// one.
	want, api := map[string]map[string]string{}, map[string]map[string]string{}
	for _, p := range getStatus(t, srv.URL) {
		for _, tg := range p.Targets {
			want[p.Name+"/"+tg.Target], api[p.Name+"/"+tg.Target] = tg.Details, tg.Details
			if tg.Details != nil {
				want[p.Name+"/"+tg.Target] = maps.Collect(func(yield func(string, string) bool) {
					for k, v := range tg.Details {
						if v != "" && !yield(k, v) {
							return
						}
					}
				})
			}
		}
	}
	if d := api["lab/beelink"]; d["libvirtVersion"] != "" || len(d) != 4 {
		t.Fatalf("/api/v1/status details of lab/beelink %q, want four, libvirtVersion empty", d)
	}
	if d := want["lab/beelink"]; len(d) != 2 || d["user"] != "proxyops" || d["pool"] != "default" {
		t.Fatalf("details with a value of lab/beelink %q, want user and pool", d)
	}
	if d := want["prod-cluster/apiserver"]; d["podTemplate"] != facts.PodTemplate || d["namespace"] != "proxies" || !strings.HasPrefix(d["dryRun"], "Ready: ") {
		t.Fatalf("/api/v1/status details of prod-cluster: %q", d)
	}

	_, page := get(t, http.DefaultClient, srv.URL+"/", nil)
	if strings.Contains(page, "<script>alert") {
		t.Error("a detail's value is on the page unescaped")
	}
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	var walk func(n *html.Node, row string)
	walk = func(n *html.Node, row string) {
		if n.Type == html.ElementNode && n.Data == "tr" && hasAttr(n, "data-target") {
			row = attr(n, "data-name") + "/" + attr(n, "data-target")
			got[row] = nil
		}
		if n.Type == html.ElementNode && attr(n, "class") == "facts" {
			if msg := n.Parent; msg == nil || attr(msg, "class") != "message" {
				t.Errorf("%s: the details are not in the message cell", row)
			}
			d := map[string]string{}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				k, v, ok := strings.Cut(text(c), ": ")
				if c.Type != html.ElementNode || c.Data != "span" || !ok {
					t.Errorf("%s: %q in the details, want a span of key: value", row, text(c))
				}
				d[k] = v
			}
			got[row] = d
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, row)
		}
	}
	walk(doc, "")
	if len(got) != len(want) {
		t.Fatalf("rows on the page %q, in /api/v1/status %q", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for row, w := range want {
		if g := got[row]; !maps.Equal(g, w) {
			t.Errorf("%s: details on the page %q, in /api/v1/status %q", row, g, w)
		}
	}
}

// getStatus reads the exporter's /api/v1/status.
func getStatus(t *testing.T, base string) []statusProvider {
	t.Helper()
	_, body := get(t, http.DefaultClient, base+"/api/v1/status", nil)
	var st struct {
		Providers []statusProvider `json:"providers"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/api/v1/status: %v\n%.2000s", err, body)
	}
	return st.Providers
}

// TestStatusShowsCapacity: a target whose verdict carries a capacity shows
// it and its binding constraint in /api/v1/status, on the page and as
// provider_health_capacity; one without has neither key nor series.
func TestStatusShowsCapacity(t *testing.T) {
	t.Parallel()
	behaviours := map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"lab": func(_ context.Context, _ *slog.Logger, target string) provider.Verdict {
			if target == "nuc" {
				return provider.Verdict{Reason: provider.ReasonReady, Capacity: provider.Capacity{Known: true, Proxies: 1234, Binding: "pool default"}}
			}
			return provider.Verdict{Reason: provider.ReasonReady, Capacity: provider.Capacity{Known: true, Proxies: 5, Binding: "memory"}}
		},
	}
	_, srv, _ := newTestExporter(t, baseConfig, behaviours, 0)
	if code, body := get(t, http.DefaultClient, srv.URL+"/?refresh=true", nil); code != http.StatusOK {
		t.Fatalf("refresh: %d %s", code, body)
	}
	_, raw := get(t, http.DefaultClient, srv.URL+"/api/v1/status", nil)
	var st struct {
		Providers []struct {
			Name    string           `json:"name"`
			Targets []map[string]any `json:"targets"`
		} `json:"providers"`
	}
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, p := range st.Providers {
		for _, tg := range p.Targets {
			id := p.Name + "/" + tg["target"].(string)
			c, hasC := tg["capacity"]
			b, hasB := tg["capacityBinding"]
			switch {
			case id == "lab/nuc":
				seen++
				if c != 1234.0 || b != "pool default" {
					t.Errorf("%s: capacity %v binding %v, want 1234 and pool default", id, c, b)
				}
			case id == "lab/beelink":
				if c != 5.0 || b != "memory" {
					t.Errorf("%s: capacity %v binding %v, want 5 and memory", id, c, b)
				}
			case hasC || hasB:
				t.Errorf("%s: capacity %v binding %v, want neither key", id, c, b)
			}
		}
	}
	if seen != 1 {
		t.Fatalf("lab/nuc not in /api/v1/status:\n%s", raw)
	}

	_, page := get(t, http.DefaultClient, srv.URL+"/", nil)
	summary, rows, _ := pageTables(t, page)
	// A column of its own, after the reason: the number and the
	// constraint in full.
	for _, r := range rows {
		want := []string{"Ready", ""}
		switch r.id {
		case "lab/nuc":
			want[1] = "1234 pool default"
		case "lab/beelink":
			want[1] = "5 memory"
		}
		if !slices.Equal(r.cells[4:6], want) {
			t.Errorf("%s: reason and capacity cells %q, want %q", r.id, r.cells[4:6], want)
		}
	}
	// The summary: the sum and the least of the capacities known, per
	// provider and in all; none for a provider without one.
	for provider, want := range map[string][2]string{kvm.Name: {"1,239", "5"}, "": {"1,239", "5"}, gcp.Name: {"–", "–"}} {
		tr := summary[provider]
		if tr == nil {
			t.Fatalf("no summary row %q", provider)
		}
		got := [2]string{strings.TrimSpace(text(findClass(tr, "capacity"))), strings.TrimSpace(text(findClass(tr, "least")))}
		if got != want {
			t.Errorf("summary of %q: capacity and least %q, want %q", provider, got, want)
		}
	}
	// The debug probe says it with the verdict.
	if _, debug := get(t, http.DefaultClient, srv.URL+"/probe?name=lab&target=nuc&debug=true", nil); !strings.Contains(debug, "Verdict for kvm/lab/nuc: Ready (up=true ready=true capacity=1234 (pool default))") {
		t.Errorf("the debug probe does not show the capacity:\n%s", debug)
	}
	_, metrics := get(t, http.DefaultClient, srv.URL+"/metrics", nil)
	var series []string
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "provider_health_capacity{") {
			series = append(series, strings.TrimSpace(line))
		}
	}
	if want := []string{`provider_health_capacity{name="lab",provider="kvm",target="beelink"} 5`, `provider_health_capacity{name="lab",provider="kvm",target="nuc"} 1234`}; !slices.Equal(series, want) {
		t.Errorf("capacity series %q, want %q", series, want)
	}
}

// TestStatusShowsDomains: a target whose verdict carries failure domains
// shows them in /api/v1/status in the kind's order, on the page under its
// message (the domains whose loss leaves proxies without a place first and
// marked), in the debug probe (a control character escaped, as the
// terminal reading it would act on it) and as the three families; one without has
// neither key nor line nor series.
func TestStatusShowsDomains(t *testing.T) {
	t.Parallel()
	behaviours := map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"lab": func(_ context.Context, _ *slog.Logger, target string) provider.Verdict {
			v := provider.Verdict{Reason: provider.ReasonReady, Message: "fits", Capacity: provider.Capacity{Known: true, Proxies: 55, Binding: "nodes"}}
			if target == "nuc" {
				v.Domains = []provider.Domain{
					{Name: "zone-a", Capacity: 40, Proxies: 5, AfterLoss: 0, HasAfterLoss: true},
					{Name: "rack-<x>\x1b[31m", Capacity: 3, Proxies: 2},
					{Name: "zone-b", Capacity: 12, Proxies: 1234, AfterLoss: -3, HasAfterLoss: true},
				}
			}
			return v
		},
	}
	_, srv, _ := newTestExporter(t, baseConfig, behaviours, 0)
	if code, body := get(t, http.DefaultClient, srv.URL+"/?refresh=true", nil); code != http.StatusOK {
		t.Fatalf("refresh: %d %s", code, body)
	}
	_, raw := get(t, http.DefaultClient, srv.URL+"/api/v1/status?name=lab", nil)
	var st struct {
		Providers []struct {
			Targets []struct {
				Target  string            `json:"target"`
				Domains []json.RawMessage `json:"domains"`
			} `json:"targets"`
		} `json:"providers"`
	}
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Providers) != 1 || len(st.Providers[0].Targets) != 2 {
		t.Fatalf("want lab's two targets:\n%s", raw)
	}
	for _, tg := range st.Providers[0].Targets {
		var got []string
		for _, d := range tg.Domains {
			got = append(got, string(d))
		}
		var want []string
		if tg.Target == "nuc" {
			want = []string{
				`{"domain":"zone-a","capacity":40,"proxies":5,"afterLoss":0}`,
				`{"domain":"rack-\u003cx\u003e\u001b[31m","capacity":3,"proxies":2}`,
				`{"domain":"zone-b","capacity":12,"proxies":1234,"afterLoss":-3}`,
			}
		}
		if !slices.Equal(compactJSON(t, got), want) {
			t.Errorf("%s: domains %q, want %q", tg.Target, got, want)
		}
	}
	if strings.Count(raw, `"domains"`) != 1 {
		t.Errorf("want the domains key on nuc only:\n%s", raw)
	}

	_, page := get(t, http.DefaultClient, srv.URL+"/", nil)
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string][]string{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "tr" && attr(n, "data-name") == "lab" {
			var spans []string
			if d := findClass(n, "domains"); d != nil {
				if d.Parent == nil || !slices.Contains(strings.Fields(attr(d.Parent, "class")), "message") {
					t.Errorf("the domains are not in the message cell")
				}
				for c := d.FirstChild; c != nil; c = c.NextSibling {
					spans = append(spans, attr(c, "class")+"|"+text(c))
				}
			}
			lines[attr(n, "data-target")] = spans
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	want := map[string][]string{
		"nuc":     {"short|zone-b: 12 fit, 1,234 proxies, after loss \u22123", "|zone-a: 40 fit, 5 proxies, after loss 0", "|rack-<x>\x1b[31m: 3 fit, 2 proxies"},
		"beelink": nil,
	}
	if !maps.EqualFunc(lines, want, slices.Equal) {
		t.Errorf("domains on the page %q, want %q", lines, want)
	}

	_, debug := get(t, http.DefaultClient, srv.URL+"/probe?name=lab&target=nuc&debug=true", nil)
	// The domains follow the verdict's line, whatever its duration.
	if want := "s: fits\n" +
		"  domain zone-a: capacity=40 proxies=5 after_loss=0\n" +
		"  domain rack-<x>\\x1b[31m: capacity=3 proxies=2\n" +
		"  domain zone-b: capacity=12 proxies=1234 after_loss=-3\n"; !strings.Contains(debug, want) {
		t.Errorf("the debug probe does not show the domains:\n%s\nwant:\n%s", debug, want)
	}
	_, metrics := get(t, http.DefaultClient, srv.URL+"/metrics", nil)
	var series []string
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "provider_health_domain_") || strings.HasPrefix(line, "provider_health_capacity_after_loss{") {
			series = append(series, strings.TrimSpace(line))
		}
	}
	if want := []string{
		`provider_health_capacity_after_loss{domain="zone-a",name="lab",provider="kvm",target="nuc"} 0`,
		`provider_health_capacity_after_loss{domain="zone-b",name="lab",provider="kvm",target="nuc"} -3`,
		"provider_health_domain_capacity{domain=\"rack-<x>\x1b[31m\",name=\"lab\",provider=\"kvm\",target=\"nuc\"} 3",
		`provider_health_domain_capacity{domain="zone-a",name="lab",provider="kvm",target="nuc"} 40`,
		`provider_health_domain_capacity{domain="zone-b",name="lab",provider="kvm",target="nuc"} 12`,
		"provider_health_domain_proxies{domain=\"rack-<x>\x1b[31m\",name=\"lab\",provider=\"kvm\",target=\"nuc\"} 2",
		`provider_health_domain_proxies{domain="zone-a",name="lab",provider="kvm",target="nuc"} 5`,
		`provider_health_domain_proxies{domain="zone-b",name="lab",provider="kvm",target="nuc"} 1234`,
	}; !slices.Equal(series, want) {
		t.Errorf("domain series %q, want %q", series, want)
	}
}

// compactJSON is each of js without its insignificant spaces.
func compactJSON(t *testing.T, js []string) []string {
	t.Helper()
	var out []string
	for _, j := range js {
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(j)); err != nil {
			t.Fatal(err)
		}
		out = append(out, b.String())
	}
	return out
}

// filterForm is the page's filter form, from its start tag to its end.
func filterForm(t *testing.T, page string) string {
	t.Helper()
	start := strings.Index(page, `<form id="filters"`)
	end := strings.Index(page[max(start, 0):], "</form>")
	if start < 0 || end < 0 {
		t.Fatalf("no filter form in the page:\n%.2000s", page)
	}
	return page[start : start+end]
}

// TestStatusPageFilterDoesNotGrow: the filter form is the same, byte for
// byte, for a configuration of four entries and for one of 300 more: the
// entry is a text field (a select of every entry added 60 KiB to each page
// of a thousand entries), and the field keeps the entry typed. A name
// typed in it selects that entry's targets, as the form sends it.
func TestStatusPageFilterDoesNotGrow(t *testing.T) {
	t.Parallel()
	forms := map[int]string{}
	for _, extra := range []int{0, 300} {
		var cfg strings.Builder
		cfg.WriteString(fleetPageConfig)
		for i := range extra {
			fmt.Fprintf(&cfg, "  - {name: kvm-eu-central-1-rack-%03d, user: proxyops, private_key_file: placeholder, known_hosts_file: placeholder, hosts: [{address: \"127.0.0.1:4%03d\", name: h}]}\n", i, i)
		}
		_, srv, _ := newTestExporter(t, cfg.String(), fleetPageBehaviours(), 0)
		code, page := get(t, http.DefaultClient, srv.URL+"/", nil)
		if code != http.StatusOK {
			t.Fatalf("%d extra entries: status %d", extra, code)
		}
		forms[extra] = filterForm(t, page)
		if extra > 0 && strings.Contains(forms[extra], "rack-001") {
			t.Errorf("the filter form names the entries:\n%s", forms[extra])
		}
	}
	if forms[0] != forms[300] {
		t.Errorf("the filter form grows with the fleet: %d bytes for 4 entries, %d for 304", len(forms[0]), len(forms[300]))
	}
	if !strings.Contains(forms[0], `<input type="search" name="name" value=""`) {
		t.Errorf("no text field for the entry in the filter form:\n%s", forms[0])
	}

	_, srv, _ := newTestExporter(t, fleetPageConfig, fleetPageBehaviours(), 0)
	_, page := get(t, http.DefaultClient, srv.URL+"/?"+url.Values{"name": {"rack"}, "provider": {""}, "reason": {""}, "state": {""}}.Encode(), nil)
	if form := filterForm(t, page); !strings.Contains(form, `name="name" value="rack"`) {
		t.Errorf("the entry field does not keep the entry typed:\n%s", form)
	}
	_, rows, _ := pageTables(t, page)
	if len(rows) != 4 {
		t.Errorf("?name=rack: %d rows, want rack's 4", len(rows))
	}
	for _, r := range rows {
		if !strings.HasPrefix(r.id, "rack/") {
			t.Errorf("?name=rack shows %s", r.id)
		}
	}
}

// TestStatusPageFiltersMatchMetrics: each filter of the page selects
// exactly the targets the metrics of the same scrape say: state=notready
// those whose provider_health_ready is 0 (down ones included), state=down
// those whose provider_health_up is 0, state=ready those whose ready is 1,
// reason=R those with provider_health_reason{reason="R"}, provider=P those
// of provider_health_target_info{provider="P"}.
func TestStatusPageFiltersMatchMetrics(t *testing.T) {
	t.Parallel()
	_, srv, _ := newTestExporter(t, fleetPageConfig, fleetPageBehaviours(), 0)
	// The scrape checks every target; the page then shows its verdicts.
	_, metrics := get(t, http.DefaultClient, srv.URL+"/metrics", nil)
	series := regexp.MustCompile(`(?m)^provider_health_(ready|up|reason|target_info)\{(.*)\} (\S+)$`)
	label := regexp.MustCompile(`(\w+)="([^"]*)"`)
	want := map[string][]string{}
	for _, m := range series.FindAllStringSubmatch(metrics, -1) {
		labels := map[string]string{}
		for _, l := range label.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		id := labels["name"] + "/" + labels["target"]
		switch {
		case m[1] == "ready" && m[3] == "0":
			want["state=notready"] = append(want["state=notready"], id)
		case m[1] == "ready" && m[3] == "1":
			want["state=ready"] = append(want["state=ready"], id)
		case m[1] == "up" && m[3] == "0":
			want["state=down"] = append(want["state=down"], id)
		case m[1] == "reason" && m[3] == "1":
			want["reason="+labels["reason"]] = append(want["reason="+labels["reason"]], id)
		case m[1] == "target_info":
			want["provider="+labels["provider"]] = append(want["provider="+labels["provider"]], id)
		}
	}
	// What the fleet's verdicts make sure of: a down target among the not
	// ready ones, and both kinds of state filter non-empty.
	if !slices.Contains(want["state=notready"], "rack/r4") || !slices.Contains(want["state=down"], "rack/r4") || len(want["state=notready"]) <= len(want["state=down"]) {
		t.Fatalf("the fleet's metrics do not have the states the test needs: %q", want)
	}
	for query, ids := range want {
		code, page := get(t, http.DefaultClient, srv.URL+"/?"+query, nil)
		if code != http.StatusOK {
			t.Errorf("?%s: status %d", query, code)
			continue
		}
		_, rows, _ := pageTables(t, page)
		var got []string
		for _, r := range rows {
			got = append(got, r.id)
		}
		slices.Sort(got)
		slices.Sort(ids)
		if !slices.Equal(got, ids) {
			t.Errorf("?%s: rows %q, the metrics say %q", query, got, ids)
		}
	}
}

// TestBreakable: a reason or a capacity's constraint may break between
// its words only, and its text is escaped.
func TestBreakable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Ready":                                "Ready",
		"HostKeyMismatch":                      "Host<wbr>Key<wbr>Mismatch",
		"APIDisabled":                          "API<wbr>Disabled",
		"region europe-west4 IN_USE_ADDRESSES": "region europe-<wbr>west4 IN_<wbr>USE_<wbr>ADDRESSES",
		"quota q pods":                         "quota q pods",
		"<b>&":                                 "&lt;b&gt;&amp;",
		"":                                     "",
	} {
		if got := string(breakable(in)); got != want {
			t.Errorf("breakable(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestStatusPageSummaryCapacitySaturates: 1,024 targets each with room
// for provider.MaxCapacity (2^53) proxies sum to 2^63, past int64: the
// summary's sum stops at MaxCapacity, per kind and in all, where an
// unsaturated sum wraps to a negative total.
func TestStatusPageSummaryCapacitySaturates(t *testing.T) {
	t.Parallel()
	full := provider.Capacity{Known: true, Proxies: provider.MaxCapacity, Binding: "memory"}
	var providers []engine.ProviderResult
	for _, kind := range []string{kvm.Name, gcp.Name} {
		p := engine.ProviderResult{Provider: exposition.Provider{Kind: kind, Name: kind + "-fleet", Reasons: provider.HTTPReasons()}}
		for i := range 1024 {
			p.Targets = append(p.Targets, engine.TargetResult{Checked: true, Series: exposition.Series{Result: exposition.Result{
				Target:  provider.Target{Name: fmt.Sprintf("t%d", i)},
				Verdict: provider.Verdict{Reason: provider.ReasonReady, Capacity: full},
			}}})
		}
		providers = append(providers, p)
	}
	v := buildPage(providers, nil, pageFilter{})
	rows := v.SummaryRows()
	if len(rows) != 3 {
		t.Fatalf("%d summary rows, want two kinds and the total", len(rows))
	}
	for _, s := range rows {
		if s.Capacity != provider.MaxCapacity || s.Least != provider.MaxCapacity || s.CapacityTargets != 1024*(1+btoi(s.Provider == "")) {
			t.Errorf("summary %q: capacity %d, least %d of %d targets; want %d", s.Provider, s.Capacity, s.Least, s.CapacityTargets, int64(provider.MaxCapacity))
		}
		if got, want := s.CapacityText(), "9,007,199,254,740,992"; got != want {
			t.Errorf("summary %q: capacity written %q, want %q", s.Provider, got, want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestStatusPageSummaryFullFleet: a fleet whose every capacity known is 0
// (rack's four hosts PoolFull; lab's without a capacity) is full, not
// unknown: its summary says 0 (sum and least) where a fleet without any
// capacity known says "–".
func TestStatusPageSummaryFullFleet(t *testing.T) {
	t.Parallel()
	behaviours := map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"rack": func(context.Context, *slog.Logger, string) provider.Verdict {
			return provider.Verdict{Reason: kvm.ReasonPoolFull, Capacity: provider.Capacity{Known: true, Proxies: 0, Binding: "pool default"}}
		},
	}
	_, srv, _ := newTestExporter(t, fleetPageConfig, behaviours, 0)
	if code, body := get(t, http.DefaultClient, srv.URL+"/?refresh=true", nil); code != http.StatusOK {
		t.Fatalf("refresh: %d %s", code, body)
	}
	_, page := get(t, http.DefaultClient, srv.URL+"/", nil)
	summary, _, _ := pageTables(t, page)
	for provider, want := range map[string][2]string{kvm.Name: {"0", "0"}, "": {"0", "0"}, gcp.Name: {"–", "–"}} {
		tr := summary[provider]
		if tr == nil {
			t.Fatalf("no summary row %q", provider)
		}
		got := [2]string{strings.TrimSpace(text(findClass(tr, "capacity"))), strings.TrimSpace(text(findClass(tr, "least")))}
		if got != want {
			t.Errorf("summary of %q: capacity and least %q, want %q", provider, got, want)
		}
	}
}

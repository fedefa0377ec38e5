//go:build browser

package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/egress-proxies/provider_health_exporter/internal/testnet"
)

// The fleet's names are as long as real ones: an entry named after its
// region, site and purpose, a host by its fully qualified name. The page
// must break them rather than grow wider than the window.
const (
	fleetName  = "kvm-eu-central-1-bare-metal-egress-fleet" // fleetHosts hosts whose ports refuse
	fleetHosts = 1000
	// fleetHost is the name of the fleet's i-th host (from 0): 40 per rack.
	fleetHost      = "hv-fra1-r%02d-u%02d.bm.prod.egress-proxies.example.internal"
	badKeyName     = "kvm-eu-west-3-lab-rack-with-an-unreadable-key" // two hosts, a private key that does not parse
	badKeyHost     = "lab-hypervisor-par3-rack-b-slot-%02d.lab.example.internal"
	fleetGCPReady  = "gcp-crawl-prod-europe-west4-egress-proxies"
	fleetGCPReady2 = "gcp-crawl-prod-us-central1-egress-proxies"
	fleetGCPFlaky  = "gcp-crawl-staging-asia-northeast1-egress-proxies" // 403
	fleetGCPQuota  = "gcp-crawl-prod-europe-west4-egress-proxies-spare" // QuotaExhausted, capacity 0
	fleetKube      = "kubernetes-prod-eu-central-1-egress-proxies-cluster"
)

// TestStatusPageFleetInBrowser opens the status page of a fleet of a
// thousand targets in headless Chromium: a kvm entry of 1,000 hosts whose
// ports refuse (down), a kvm entry whose key does not parse (down, another
// reason), two gcp entries whose Compute API answers (ready), one whose API
// answers 403 (not ready) and a kubernetes entry whose port refuses. It
// reports how long the page takes to load (nothing is asserted about it),
// and checks that the summary counts what /api/v1/status says, that the
// rows come by state with the ones not ready first and every row matching
// /api/v1/status, that the page fits the 1366px window with the fleet's
// long names (no sideways scroll, a readable message column, Ready rows of
// one line, no empty details), and that each filter (chosen with the
// little script, an entry picked from the entry field's suggestions, with
// the plain form and scripts off, and by a link of the summary) shows
// exactly the targets it selects.
func TestStatusPageFleetInBrowser(t *testing.T) {
	artifacts := t.ArtifactDir()
	t.Logf("screenshots and logs go to %s", artifacts)
	compute := newBrowserCompute(t, fleetGCPReady, fleetGCPReady2, fleetGCPFlaky, fleetGCPQuota)
	compute.flaky = fleetGCPFlaky
	compute.forbidFlaky()
	base, exporterPID := startFleetExporter(t, artifacts, compute.URL)

	// Every target gets a verdict through the API; the page then only
	// shows them.
	resp, err := http.Get(base + prefix + "/api/v1/status?refresh=true")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("refreshing through /api/v1/status: %s", resp.Status)
	}

	ctx := startChromium(t, artifacts)
	console := watchConsole(ctx)
	page := &statusPage{t: t, ctx: ctx, base: base, prefix: prefix}
	page.reportLoadTimes(base+prefix+"/", 3, exporterPID, filepath.Join(artifacts, "fleet-load-times.txt"))
	rows := page.rows()
	page.viewportScreenshot(filepath.Join(artifacts, "status-page-fleet.png"))
	status := page.status()
	if len(rows) != fleetHosts+7 {
		t.Fatalf("%d rows, want %d", len(rows), fleetHosts+7)
	}
	page.compareWithStatus(rows)
	checkFleetVerdicts(t, status)
	page.checkSummary(status)
	page.checkLayout(status)
	page.checkDetailsHidden(status)
	page.scrollTo("#targets")
	page.viewportScreenshot(filepath.Join(artifacts, "status-page-fleet-targets.png"))
	page.scrollTo("#targets tbody.ready")
	page.viewportScreenshot(filepath.Join(artifacts, "status-page-fleet-ready.png"))
	console.assertNoErrors(t, "the fleet's status page", false)

	// A filter chosen in a select applies at once (the page's script),
	// leaving the unset ones out of the address.
	page.navigateBy("choosing a reason", chromedp.Evaluate[chromedp.Void](`(() => {
		const s = document.querySelector('#filters select[name=reason]');
		s.value = 'Forbidden';
		s.dispatchEvent(new Event('change', {bubbles: true}));
	})()`))
	page.checkFiltered(status, "?reason=Forbidden", func(_ statusProvider, tg statusTarget) bool { return tg.Reason == "Forbidden" })

	// The entry is typed: the field suggests the entries of the rows shown
	// (on the whole fleet's page, every entry), and picking one applies it.
	page.open(base + prefix + "/")
	page.pickSuggestedEntry(status, fleetGCPReady2)

	// Without scripts the form's Filter button does the same; the unset
	// selects come along empty.
	page.scripts(false)
	page.navigateBy("the Filter button with scripts off", chromedp.Steps(
		page.choose(map[string]string{"reason": "", "provider": "kvm", "name": badKeyName}),
		chromedp.Click(chromedp.CSS("#filters button[type=submit]")),
	))
	page.checkFiltered(status, "?provider=kvm&name="+badKeyName+"&reason=&state=", func(p statusProvider, _ statusTarget) bool {
		return p.Provider == "kvm" && p.Name == badKeyName
	})
	page.screenshot(filepath.Join(artifacts, "status-page-fleet-filtered.png"))
	page.scripts(true)

	// A count of the summary selects its targets: here a thousand rows.
	page.open(base + prefix + "/")
	page.navigateBy("the summary's kvm Unreachable link", chromedp.Click(
		chromedp.CSS(`#summary tr[data-provider="kvm"] td.down-by .reason[data-reason="Unreachable"] a`)))
	page.checkFiltered(status, "?provider=kvm&reason=Unreachable", func(p statusProvider, tg statusTarget) bool {
		return p.Provider == "kvm" && tg.Reason == "Unreachable"
	})

	// Not ready: every target whose ready is 0, the down ones too; the
	// page opens on them, and its cells fit as the whole page's do.
	page.open(base + prefix + "/?state=notready")
	page.checkFiltered(status, "?state=notready", func(_ statusProvider, tg statusTarget) bool { return tg.Checked && !tg.Ready })
	page.checkCells(status)
	page.viewportScreenshot(filepath.Join(artifacts, "status-page-fleet-notready.png"))
	console.assertNoErrors(t, "the filtered pages", false)
}

// pickSuggestedEntry checks that the entry field of the page, the whole
// fleet's, suggests every entry of status, then picks entry from the
// suggestions and checks the page it leads to.
func (p *statusPage) pickSuggestedEntry(status []statusProvider, entry string) {
	t := p.t
	t.Helper()
	suggested := browserValue(p, "reading the entry suggestions", chromedp.Evaluate[[]string](`(() => {
		const f = document.querySelector('#filters input[name=name]');
		f.dispatchEvent(new FocusEvent('focus'));
		return Array.from(document.getElementById(f.getAttribute('list')).options).map(o => o.value);
	})()`))
	var entries []string
	for _, sp := range status {
		entries = append(entries, sp.Name)
	}
	if slices.Sort(suggested); !slices.Equal(suggested, slices.Sorted(slices.Values(entries))) {
		t.Errorf("the entry field suggests %q, want every entry: %q", suggested, entries)
	}
	p.navigateBy("picking a suggested entry", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
		const f = document.querySelector('#filters input[name=name]');
		f.value = %q;
		f.dispatchEvent(new InputEvent('input', {bubbles: true, inputType: 'insertReplacementText'}));
	})()`, entry)))
	p.checkFiltered(status, "?name="+entry, func(sp statusProvider, _ statusTarget) bool { return sp.Name == entry })
}

// startFleetExporter starts the binary with the fleet's configuration and
// returns its base URL and PID.
func startFleetExporter(t *testing.T, artifacts, computeURL string) (string, int) {
	dir := t.TempDir()
	sa, key, knownHosts, kubeconfig := writeBrowserFiles(t, dir)
	badKey := filepath.Join(dir, "not-a-key")
	writeFile(t, badKey, "this is not a private key\n")
	var cfg strings.Builder
	// A check's budget far above what a thousand refused dials take: the
	// verdicts are the test's, whatever the machine's load.
	fmt.Fprintf(&cfg, "defaults: {timeout: 60s}\ngcp:\n")
	// Capacities with constraints of every length: CPUS binds the first
	// (2), IN_USE_ADDRESSES the second and, used up, the last (0).
	for _, e := range [][2]string{
		{fleetGCPReady, ", regions: [us-central1], min_quota_headroom: {CPUS: 8, INSTANCES: 1, IN_USE_ADDRESSES: 1}"},
		{fleetGCPReady2, ", regions: [us-central1], min_quota_headroom: {IN_USE_ADDRESSES: 1}"},
		{fleetGCPFlaky, ""},
		{fleetGCPQuota, ", regions: [europe-west4], min_quota_headroom: {IN_USE_ADDRESSES: 1}"},
	} {
		fmt.Fprintf(&cfg, "  - {name: %[1]s, project: %[1]s, credentials_file: %[2]s, endpoint: %[3]q%[4]s}\n", e[0], sa, computeURL, e[1])
	}
	fmt.Fprintf(&cfg, "kubernetes:\n  - {name: %s, kubeconfig: %s}\nkvm:\n", fleetKube, kubeconfig)
	fmt.Fprintf(&cfg, "  - name: %s\n    user: proxyops\n    private_key_file: %s\n    known_hosts_file: %s\n    max_concurrent_dials: 64\n    hosts:\n",
		fleetName, key, knownHosts)
	for i := range fleetHosts {
		fmt.Fprintf(&cfg, "      - {address: %q, name: "+fleetHost+"}\n", testnet.RefusedAddr(t), i/40+1, i%40+1)
	}
	fmt.Fprintf(&cfg, "  - name: %s\n    user: proxyops\n    private_key_file: %s\n    known_hosts_file: %s\n    hosts:\n",
		badKeyName, badKey, knownHosts)
	for i := range 2 {
		fmt.Fprintf(&cfg, "      - {address: %q, name: "+badKeyHost+"}\n", testnet.RefusedAddr(t), i+1)
	}
	path := filepath.Join(dir, "provider_health.yml")
	writeFile(t, path, cfg.String())
	return launchBrowserExporter(t, artifacts, dir, path)
}

// checkFleetVerdicts checks the verdicts against what the test set up, so
// that the page and /api/v1/status do not agree on a wrong answer.
func checkFleetVerdicts(t *testing.T, status []statusProvider) {
	t.Helper()
	want := map[string]string{
		fleetGCPReady: "Ready", fleetGCPReady2: "Ready", fleetGCPFlaky: "Forbidden", fleetGCPQuota: "QuotaExhausted",
		fleetKube: "Unreachable", fleetName: "Unreachable", badKeyName: "SSHMaterialInvalid",
	}
	for _, p := range status {
		for _, tg := range p.Targets {
			if string(tg.Reason) != want[p.Name] {
				t.Errorf("%s/%s: %s (%s), want %s", p.Name, tg.Target, tg.Reason, tg.Message, want[p.Name])
			}
		}
	}
}

// reportLoadTimes opens url n times and logs how long each load took, as
// Go saw it and as the browser's Navigation Timing says, and the CPU time
// the exporter (exporterPID) and Chromium's processes spent on it, which a
// busy machine does not inflate as it does the times; it writes them to
// report. Nothing is asserted: how fast a loaded machine is is no test.
func (p *statusPage) reportLoadTimes(url string, n, exporterPID int, report string) {
	p.t.Helper()
	chromium := chromedp.FromContext(p.ctx).Browser.Process().Pid
	var lines []string
	for i := range n {
		exporterCPU, chromiumCPU := procCPUTime(exporterPID), treeCPUTime(chromium)
		start := time.Now()
		p.open(url)
		wall := time.Since(start)
		exporterCPU, chromiumCPU = procCPUTime(exporterPID)-exporterCPU, treeCPUTime(chromium)-chromiumCPU
		nav := browserValue(p, "navigation timing", chromedp.Evaluate[map[string]float64](`(() => {
			const e = performance.getEntriesByType('navigation')[0];
			return {responseStart: e.responseStart, responseEnd: e.responseEnd, domContentLoaded: e.domContentLoadedEventEnd, load: e.loadEventEnd, bytes: e.transferSize};
		})()`))
		line := fmt.Sprintf("load %d of %s: %s in Go; in the browser: first byte %.0fms, document %.0fms, DOMContentLoaded %.0fms, load %.0fms; %.0f KiB; CPU: exporter %s, Chromium %s",
			i+1, url, wall.Round(time.Millisecond), nav["responseStart"], nav["responseEnd"], nav["domContentLoaded"], nav["load"], nav["bytes"]/1024, exporterCPU, chromiumCPU)
		p.t.Log(line)
		lines = append(lines, line)
	}
	if err := os.WriteFile(report, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func (p *statusPage) viewportScreenshot(path string) {
	p.t.Helper()
	png := browserValue(p, "screenshot", chromedp.CaptureScreenshot())
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s", path)
}

// scripts switches the page's scripts on or off (the test's own
// evaluations run either way).
func (p *statusPage) scripts(on bool) {
	p.t.Helper()
	browserValue(p, "switching scripts", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: !on})
		return err
	}))
}

// choose sets, as a user does, each field of the filter form whose value
// is given: a select's option of that value, the entry's text field to
// the text; and fires no event: the page's script does not see it.
func (p *statusPage) choose(values map[string]string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		for name, value := range values {
			js := fmt.Sprintf(`(() => {
				const f = document.querySelector('#filters [name=%q]');
				if (f.tagName === 'INPUT') {
					f.value = %q;
					return 0;
				}
				const i = Array.from(f.options).findIndex(o => o.value === %[2]q);
				f.selectedIndex = i;
				return i;
			})()`, name, value)
			i, err := chromedp.Evaluate[int](js)(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			if i < 0 {
				return chromedp.Void{}, fmt.Errorf("the select %s has no option %q", name, value)
			}
		}
		return chromedp.Void{}, nil
	}
}

// navigateBy runs a, which must load a page of the exporter, and waits for
// it.
func (p *statusPage) navigateBy(what string, a chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserWait)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, a)
	if err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
	if resp.Status != http.StatusOK {
		p.t.Fatalf("%s loaded %s: status %d", what, resp.URL, resp.Status)
	}
}

// checkFiltered checks that the page is at the filter query and shows
// exactly the targets of status that match, in page order, and says how
// many of how many it shows.
func (p *statusPage) checkFiltered(status []statusProvider, query string, match func(statusProvider, statusTarget) bool) {
	t := p.t
	t.Helper()
	if got, want := p.location(), p.base+p.prefix+"/"+query; got != want {
		t.Errorf("the filter led to %s, want %s", got, want)
	}
	var want []string
	total := 0
	for _, state := range pageOrder {
		for _, sp := range status {
			for _, tg := range sp.Targets {
				if state == pageOrder[0] {
					total++
				}
				if stateOf(tg) == state && match(sp, tg) {
					want = append(want, sp.Name+"/"+tg.Target)
				}
			}
		}
	}
	var got []string
	for _, r := range p.rows() {
		got = append(got, r.ID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s shows %d rows:\n%.1000q\nwant %d:\n%.1000q", query, len(got), got, len(want), want)
	}
	shown := browserValue(p, "reading the count shown", chromedp.Evaluate[string](`document.getElementById('shown').innerText`))
	if wantShown := fmt.Sprintf("Showing %s of %s targets.", thousands(len(want)), thousands(total)); shown != wantShown {
		t.Errorf("%s says %q, want %q", query, shown, wantShown)
	}
	if len(want) > 0 {
		p.checkFirstRowShown(query)
	}
	t.Logf("%s: %d rows", query, len(got))
}

// summaryRowJS reads the summary's rows: their counts by column, and the
// reasons listed under not ready and down with their counts and text.
const summaryRowJS = `Array.from(document.querySelectorAll('#summary tr[data-provider]')).map(tr => ({
	provider: tr.dataset.provider,
	counts: Object.fromEntries(['entries', 'targets', 'ready', 'notready', 'down', 'unchecked'].map(c =>
		[c, Number(tr.querySelector('td.' + c).innerText.replace(/,/g, ''))])),
	notReadyBy: Array.from(tr.querySelectorAll('td.notready-by .reason')).map(s => ({reason: s.dataset.reason, count: Number(s.dataset.count), text: s.innerText})),
	downBy: Array.from(tr.querySelectorAll('td.down-by .reason')).map(s => ({reason: s.dataset.reason, count: Number(s.dataset.count), text: s.innerText})),
	capacity: [tr.querySelector('td.capacity').innerText, tr.querySelector('td.least').innerText],
}))`

type summaryReason struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
	Text   string `json:"text"`
}

type summaryShown struct {
	Provider   string          `json:"provider"`
	Counts     map[string]int  `json:"counts"`
	NotReadyBy []summaryReason `json:"notReadyBy"`
	DownBy     []summaryReason `json:"downBy"`
	Capacity   []string        `json:"capacity"` // the sum and the least, as shown
}

// checkSummary checks each row of the summary (one per provider and the
// total, provider "") against the counts of status.
func (p *statusPage) checkSummary(status []statusProvider) {
	t := p.t
	t.Helper()
	type tally struct {
		counts             map[string]int
		notReadyBy, downBy map[string]int
		capacities         []int64
	}
	want := map[string]*tally{}
	var order []string
	for _, p := range status {
		for _, key := range []string{p.Provider, ""} {
			w := want[key]
			if w == nil {
				w = &tally{counts: map[string]int{"entries": 0, "targets": 0, "ready": 0, "notready": 0, "down": 0, "unchecked": 0}, notReadyBy: map[string]int{}, downBy: map[string]int{}}
				want[key] = w
				order = append(order, key)
			}
			w.counts["entries"]++
			for _, tg := range p.Targets {
				w.counts["targets"]++
				// Not ready counts every target whose ready is 0, down
				// ones (up 0) included.
				switch s := stateOf(tg); s {
				case "notready":
					w.notReadyBy[string(tg.Reason)]++
				case "down":
					w.counts["notready"]++
					w.downBy[string(tg.Reason)]++
				}
				w.counts[stateOf(tg)]++
				if tg.Capacity != nil {
					w.capacities = append(w.capacities, *tg.Capacity)
				}
			}
		}
	}
	rows := browserValue(p, "reading the summary", chromedp.Evaluate[[]summaryShown](summaryRowJS))
	var gotOrder []string
	for _, r := range rows {
		gotOrder = append(gotOrder, r.Provider)
		w := want[r.Provider]
		if w == nil {
			t.Errorf("summary row of %q, a provider /api/v1/status does not have", r.Provider)
			continue
		}
		by := func(rs []summaryReason) map[string]int {
			out := map[string]int{}
			for _, rc := range rs {
				out[rc.Reason] = rc.Count
				if want := rc.Reason + " " + thousands(rc.Count); rc.Text != want {
					t.Errorf("summary of %q: %q, want %q", r.Provider, rc.Text, want)
				}
			}
			return out
		}
		got := fmt.Sprint(r.Counts, by(r.NotReadyBy), by(r.DownBy))
		if exp := fmt.Sprint(w.counts, w.notReadyBy, w.downBy); got != exp {
			t.Errorf("summary of %q: %s; /api/v1/status says %s", r.Provider, got, exp)
		}
		// The capacity: the sum over the targets with one, and the least.
		wantCap := []string{"–", "–"}
		if len(w.capacities) > 0 {
			var sum int64
			for _, c := range w.capacities {
				sum += c
			}
			wantCap = []string{thousands(int(sum)), thousands(int(slices.Min(w.capacities)))}
		}
		if !slices.Equal(r.Capacity, wantCap) {
			t.Errorf("summary of %q: capacity and least %q; /api/v1/status says %q", r.Provider, r.Capacity, wantCap)
		}
	}
	// The providers in the order of /api/v1/status, the total last.
	wantOrder := slices.DeleteFunc(slices.Clone(order), func(s string) bool { return s == "" })
	wantOrder = append(wantOrder, "")
	if !slices.Equal(gotOrder, wantOrder) {
		t.Errorf("summary rows %q, want %q", gotOrder, wantOrder)
	}
	t.Logf("summary: %+v", rows)
}

// checkLayout checks that the page fits the window, 1366px wide: it does
// not scroll sideways, however long the names and messages; that every
// message cell is at least 25 of its own em wide, whatever else the row
// holds: a readable line, not a few characters a line; and checkCells
// against status, the verdicts the page shows.
func (p *statusPage) checkLayout(status []statusProvider) {
	t := p.t
	t.Helper()
	widths := browserValue(p, "measuring the page", chromedp.Evaluate[[]float64](`(() => {
		window.scrollTo(100000, window.scrollY);
		const x = window.scrollX;
		window.scrollTo(0, window.scrollY);
		return [document.documentElement.scrollWidth, document.documentElement.clientWidth, window.innerWidth, x];
	})()`))
	if widths[2] != windowWidth {
		t.Errorf("the window is %.0fpx wide, want %d", widths[2], windowWidth)
	}
	if widths[0] > widths[1] || widths[3] != 0 {
		columns := browserValue(p, "measuring the columns", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#targets thead th, #summary thead th')).map(th => th.innerText + ' ' + Math.round(th.getBoundingClientRect().width) + 'px')`))
		t.Errorf("the page is %.0fpx wide, wider than the window's %.0fpx: it scrolls sideways (to %.0fpx); its columns: %q", widths[0], widths[1], widths[3], columns)
	}
	ems := browserValue(p, "measuring the message column", chromedp.Evaluate[[]float64](`Array.from(document.querySelectorAll('#targets td.message')).map(td =>
		td.getBoundingClientRect().width / parseFloat(getComputedStyle(td).fontSize))`))
	if len(ems) == 0 {
		t.Fatal("no message cells")
	}
	narrowest := slices.Min(ems)
	if narrowest < 25 {
		t.Errorf("the narrowest message cell is %.1fem wide, want at least 25em", narrowest)
	}
	t.Logf("message column: %d cells, the narrowest %.1fem wide; the page %.0fpx wide in a window of %.0fpx", len(ems), narrowest, widths[0], widths[2])

	if p.checkCells(status) == 0 {
		t.Error("no Ready row with a capacity on the page: the test shows nothing of them")
	}
}

// checkCells checks, on the page shown, that no reason or capacity cell
// overflows (its scroll width is within its client width: nothing cut,
// no word broken out of it), that every Ready row shows its capacity when
// it has one (status says it), whole and within its cell, and that on a
// Ready row only the message is cut, to one line. status must be of the
// verdicts the page shows (openAtStatus): a capacity can move from one
// check to the next (the demo's is a host's free memory). It returns how
// many Ready rows show a capacity.
func (p *statusPage) checkCells(status []statusProvider) int {
	t := p.t
	t.Helper()
	type cell struct {
		ID      string  `json:"id"`
		Class   string  `json:"class"`
		Row     string  `json:"row"`
		Text    string  `json:"text"`
		Scroll  float64 `json:"scroll"`
		Client  float64 `json:"client"`
		ScrollH float64 `json:"scrollH"`
		ClientH float64 `json:"clientH"`
		White   string  `json:"white"`
	}
	cells := browserValue(p, "measuring the reason and capacity cells", chromedp.Evaluate[[]cell](`Array.from(document.querySelectorAll('#targets tr[data-target] td.reason, #targets tr[data-target] td.capacity, #targets tr.ready[data-target] td.message')).map(td => ({
		id: td.parentElement.dataset.name + '/' + td.parentElement.dataset.target, class: td.className, row: td.parentElement.className,
		text: td.innerText, scroll: td.scrollWidth, client: td.clientWidth, scrollH: td.scrollHeight, clientH: td.clientHeight,
		white: getComputedStyle(td).whiteSpace}))`))
	capacity := map[string]string{}
	for _, sp := range status {
		for _, tg := range sp.Targets {
			if tg.Ready && tg.Capacity != nil {
				capacity[sp.Name+"/"+tg.Target] = strings.TrimSpace(tg.CapacityText() + " " + tg.CapacityBinding)
			}
		}
	}
	reasons, capacities, readyShown := 0, 0, 0
	for _, c := range cells {
		switch c.Class {
		case "message":
			if c.White != "nowrap" {
				t.Errorf("%s: the message of a Ready row wraps (white-space %s): it is cut to one line", c.ID, c.White)
			}
			continue
		case "state reason":
			reasons++
		case "capacity":
			capacities++
		}
		if c.Scroll > c.Client {
			t.Errorf("%s: the %s cell %q overflows: scroll width %.0f, client width %.0f", c.ID, c.Class, c.Text, c.Scroll, c.Client)
		}
		if want, ok := capacity[c.ID]; ok && c.Class == "capacity" {
			readyShown++
			if c.Text != want || c.ScrollH > c.ClientH {
				t.Errorf("%s: the Ready row's capacity cell shows %q (scroll height %.0f, client height %.0f), want %q whole", c.ID, c.Text, c.ScrollH, c.ClientH, want)
			}
		}
	}
	if reasons == 0 || capacities == 0 {
		t.Errorf("%d reason and %d capacity cells on the page: nothing measured", reasons, capacities)
	}
	wantShown := 0
	for _, r := range p.rows() {
		if _, ok := capacity[r.ID]; ok {
			wantShown++
		}
	}
	if readyShown != wantShown {
		t.Errorf("%d Ready rows with a capacity show it, want %d", readyShown, wantShown)
	}
	t.Logf("%d reason and %d capacity cells within their widths; %d Ready rows show their capacity", reasons, capacities, readyShown)
	return readyShown
}

// checkFirstRowShown checks that the page, as it opens (scrolled to the
// top), shows its first target row within the first screen.
func (p *statusPage) checkFirstRowShown(what string) {
	t := p.t
	t.Helper()
	pos := browserValue(p, "placing the first row", chromedp.Evaluate[[]float64](`(() => {
		window.scrollTo(0, 0);
		const tr = document.querySelector('#targets tr[data-target]');
		if (!tr) { return []; }
		const r = tr.getBoundingClientRect();
		return [r.top, r.bottom, window.innerHeight];
	})()`))
	if len(pos) == 0 {
		t.Errorf("%s: no target row", what)
		return
	}
	if pos[0] < 0 || pos[1] > pos[2] {
		t.Errorf("%s: the first row is at %.0f-%.0fpx, outside the first screen (%.0fpx high)", what, pos[0], pos[1], pos[2])
	}
	t.Logf("%s: the first row at %.0f-%.0fpx of a %.0fpx screen", what, pos[0], pos[1], pos[2])
}

// checkDetailsHidden checks that status has details without a value (a
// kvm host never reached has no libvirt version), so that the comparison
// of every row's details with status, less those (compareWithStatus),
// shows that the page leaves them out; and that no detail on the page is
// empty.
func (p *statusPage) checkDetailsHidden(status []statusProvider) {
	t := p.t
	t.Helper()
	empty := 0
	for _, sp := range status {
		for _, tg := range sp.Targets {
			if len(shownDetails(tg.Details)) < len(tg.Details) {
				empty++
			}
		}
	}
	if empty == 0 {
		t.Error("no target of /api/v1/status has a detail without a value")
	}
	shown := browserValue(p, "reading the empty details", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#targets div.facts span')).map(s => s.textContent).filter(s => s.endsWith(': '))`))
	if len(shown) > 0 {
		t.Errorf("the page shows %d details without a value: %.200q", len(shown), shown)
	}
	t.Logf("%d targets have details without a value, left out of the page", empty)
}

// scrollTo scrolls the element of the CSS selector to the top of the window.
func (p *statusPage) scrollTo(selector string) {
	p.t.Helper()
	browserValue(p, "scrolling to "+selector, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).scrollIntoView()`, selector)))
}

// clockTick is the unit of the CPU times of /proc/<pid>/stat (USER_HZ,
// 100 on every Linux architecture Go builds for).
const clockTick = 10 * time.Millisecond

// procCPUTime is the user and system CPU time pid has used so far; 0 when it
// cannot be read.
func procCPUTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is the first, utime the 12th, stime the 13th.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	var utime, stime int64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	return time.Duration(utime+stime) * clockTick
}

// treeCPUTime is the CPU time of pid and of every live process below it
// (Chromium's renderer, GPU and utility processes).
func treeCPUTime(pid int) time.Duration {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var child int
		if _, err := fmt.Sscan(e.Name(), &child); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		_, rest, _ := strings.Cut(string(b), ") ")
		if f := strings.Fields(rest); len(f) > 1 {
			var ppid int
			fmt.Sscan(f[1], &ppid)
			children[ppid] = append(children[ppid], child)
		}
	}
	var total time.Duration
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		total += procCPUTime(queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return total
}

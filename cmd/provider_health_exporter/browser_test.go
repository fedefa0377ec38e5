//go:build browser

package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/ssh"

	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/internal/testnet"
)

// The browser test drives headless Chromium (Debian's chromium package,
// installed by testdata/install-deps.sh) against the real binary: `make
// integration-browser`, or by hand
//
//	go test -tags browser -count=1 -run TestStatusPageInBrowser -artifacts -outputdir /tmp/phe-browser ./cmd/provider_health_exporter/
//
// The screenshots and the logs of the exporter and of Chromium are saved
// under the test's artifact directory (kept with -artifacts).

const (
	// browserWait bounds every wait of the test for a page, a process or a
	// condition. Nothing is asserted about how fast anything comes.
	browserWait = 2 * time.Minute
	// prefix is the --web.route-prefix the exporter serves under.
	prefix = "/phe"

	gcpReadyName = "gcp-ready"
	gcpFlakyName = "gcp-flaky" // Ready at first, then 403
	kubeName     = "kube-refused"
	kvmName      = "kvm-lab"
	kvmHost      = "beelink"
	// windowWidth is the browser window's width in CSS pixels.
	windowWidth = 1366
	accessToken = "ya29.browser-test-token"
)

// TestStatusPageInBrowser opens the status page in headless Chromium, the
// exporter serving under --web.route-prefix, with targets in every state: a
// gcp entry whose Compute API answers (ready), one whose API answers 403
// after a first good answer (up but not ready, two transitions), and a
// kubernetes entry and a kvm host whose ports refuse (down). It checks what
// the browser shows: the table against /api/v1/status, a colour per state,
// that the refresh button runs one check per entry, that every link answers
// 200, and that the console stays free of errors.
func TestStatusPageInBrowser(t *testing.T) {
	artifacts := t.ArtifactDir()
	t.Logf("screenshots and logs go to %s", artifacts)
	compute := newBrowserCompute(t, gcpReadyName, gcpFlakyName)
	base := startBrowserExporter(t, artifacts, compute.URL)
	ctx := startChromium(t, artifacts)
	console := watchConsole(ctx)
	page := &statusPage{t: t, ctx: ctx, base: base, prefix: prefix}

	// Before any check: every target never checked, and loading the page
	// (reached through the bare prefix, which redirects) checks nothing.
	page.open(base + prefix)
	if got, want := page.location(), base+prefix+"/"; got != want {
		t.Errorf("the bare prefix led to %s, want %s", got, want)
	}
	unchecked := page.rows()
	if len(unchecked) != 4 {
		t.Fatalf("%d rows before any check, want 4: %+v", len(unchecked), unchecked)
	}
	for _, r := range unchecked {
		if r.Class != "unchecked" || len(r.Cells) < 4 || r.Cells[3] != "never checked" {
			t.Errorf("row before any check: %+v, want class unchecked and \"never checked\"", r)
		}
	}
	page.screenshot(filepath.Join(artifacts, "status-page-unchecked.png"))
	for _, p := range page.status() {
		for _, tg := range p.Targets {
			if tg.Checked {
				t.Errorf("%s/%s checked by loading the page", p.Name, tg.Target)
			}
		}
	}

	// The refresh button runs one check per entry. The scrape that reads
	// checks_total counts one more per entry, in some mode, of its own.
	// First from zero: the first check of each entry, all live.
	entries := []string{"gcp/" + gcpReadyName, "gcp/" + gcpFlakyName, "kubernetes/" + kubeName, "kvm/" + kvmName}
	page.clickRefresh()
	compute.forbidFlaky()
	before := scrapeChecks(t, base+prefix+"/metrics")
	checkRefreshCounts(t, "the first refresh", entries, map[string]float64{}, before, "")
	// Then between two reads. The kvm host's dial has failed twice: it
	// may be held back now, and the refresh and the scrape then serve its
	// last verdict (mode backoff) instead of dialling.
	page.open(base + prefix + "/")
	page.clickRefresh()
	after := scrapeChecks(t, base+prefix+"/metrics")
	checkRefreshCounts(t, "a second refresh", entries, before, after, "kvm/"+kvmName)

	// The page shows what the scrape found, as /api/v1/status says it.
	page.open(base + prefix + "/")
	rows := page.rows()
	page.screenshot(filepath.Join(artifacts, "status-page.png"))
	page.compareWithStatus(rows)
	page.checkExpected(rows)
	checkColours(t, unchecked, rows)
	console.assertNoErrors(t, "the status page", false)
	page.followLinks()
	console.assertNoErrors(t, "the pages it links to", true)
}

// --- the exporter and what it checks -----------------------------------------

// browserCompute is a loopback Compute API: the projects it is given
// answer the aggregatedList page, projects/<gcpFlakyName> too until
// forbidFlaky, then 403, with bodies recorded in the real API's shape.
type browserCompute struct {
	*httptest.Server
	flaky  string // the project that answers 403 after forbidFlaky
	denied atomic.Bool
}

// newBrowserCompute answers for projects; gcpFlakyName is the flaky one
// unless flaky is set before forbidFlaky.
func newBrowserCompute(t *testing.T, projects ...string) *browserCompute {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "gcp", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ready, forbidden := read("aggregated-instances.json"), read("error-403-forbidden.json")
	c := &browserCompute{flaky: gcpFlakyName}
	regionOK, regionExhausted := read("regions-ok.json"), read("regions-exhausted.json")
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// regions.get: europe-west4 has its IN_USE_ADDRESSES used up
		// (regions-exhausted.json), us-central1 room for two proxies of 8
		// CPUs (regions-ok.json), as the demo's stand-in answers.
		if m := browserRegionPath.FindStringSubmatch(r.URL.Path); m != nil && slices.Contains(projects, m[1]) {
			body := regionOK
			if m[2] == "europe-west4" {
				body = regionExhausted
			}
			w.Header().Set("Content-Type", "application/json; charset=UTF-8")
			w.Write(bytes.ReplaceAll(body, []byte("crawl-prod-123"), []byte(m[1])))
			return
		}
		project := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/compute/v1/projects/"), "/aggregated/instances")
		if r.Method != http.MethodGet || project == r.URL.Path || !slices.Contains(projects, project) ||
			r.Header.Get("Authorization") != "Bearer "+accessToken {
			t.Errorf("Compute API: unexpected %s %s", r.Method, r.URL)
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		body := ready
		if project == c.flaky && c.denied.Load() {
			body = forbidden
			w.WriteHeader(http.StatusForbidden)
		}
		w.Write(bytes.ReplaceAll(body, []byte("crawl-prod-123"), []byte(project)))
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *browserCompute) forbidFlaky() { c.denied.Store(true) }

var browserRegionPath = regexp.MustCompile(`^/compute/v1/projects/([^/]+)/regions/([a-z0-9-]+)$`)

// startBrowserExporter writes the configuration and its files, starts the
// binary under the route prefix and returns its base URL once it is ready.
func startBrowserExporter(t *testing.T, artifacts, computeURL string) string {
	dir := t.TempDir()
	sa, key, knownHosts, kubeconfig := writeBrowserFiles(t, dir)
	cfg := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfg, fmt.Sprintf(`gcp:
  - {name: %[1]s, project: %[1]s, credentials_file: %[3]s, endpoint: "%[4]s"}
  - {name: %[2]s, project: %[2]s, credentials_file: %[3]s, endpoint: "%[4]s"}
kubernetes:
  - {name: %[5]s, kubeconfig: %[6]s}
kvm:
  - name: %[7]s
    user: proxyops
    private_key_file: %[8]s
    known_hosts_file: %[9]s
    hosts: [{address: "%[10]s", name: %[11]s}]
`, gcpReadyName, gcpFlakyName, sa, computeURL, kubeName, kubeconfig, kvmName, key, knownHosts, testnet.RefusedAddr(t), kvmHost))
	base, _ := launchBrowserExporter(t, artifacts, dir, cfg)
	return base
}

// writeBrowserFiles writes into dir what the entries of the tests read: a
// service-account file whose token endpoint answers, an SSH key and a
// known_hosts (writeSSHMaterial), and a kubeconfig of an API server whose
// port refuses.
func writeBrowserFiles(t *testing.T, dir string) (sa, key, knownHosts, kubeconfig string) {
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/token" {
			t.Errorf("token endpoint: unexpected %s %s", r.Method, r.URL)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"expires_in":3599,"token_type":"Bearer"}`, accessToken)
	}))
	t.Cleanup(tokens.Close)
	sa = filepath.Join(dir, "service-account.json")
	writeFile(t, sa, serviceAccountJSON(t, tokens.URL+"/token"))
	key, knownHosts = filepath.Join(dir, "id_ed25519"), filepath.Join(dir, "known_hosts")
	writeSSHMaterial(t, key, knownHosts)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	writeFile(t, kubeconfig, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: browser-test-token}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, testnet.RefusedAddr(t)))
	return sa, key, knownHosts, kubeconfig
}

// launchBrowserExporter starts the binary with the configuration file cfg
// under the route prefix and returns its base URL and PID once it is ready.
func launchBrowserExporter(t *testing.T, artifacts, dir, cfg string) (string, int) {
	logFile, err := os.Create(filepath.Join(artifacts, "exporter.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	cmd, exited, addr := startExporter(t, dir, logFile, "--config.file="+cfg,
		"--web.route-prefix="+prefix, "--log.level=debug")
	base := "http://" + addr
	awaitCondition(t, "the exporter to be ready", func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the exporter exited: %v; log in %s", err, logFile.Name())
		default:
		}
		resp, err := http.Get(base + prefix + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return base, cmd.Process.Pid
}

// writeSSHMaterial writes a key that parses and a known_hosts naming another
// host: the kvm check gets as far as the TCP dial, which is refused.
func writeSSHMaterial(t *testing.T, keyPath, knownHostsPath string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, keyPath, string(pem.EncodeToMemory(block)))
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, knownHostsPath, "[192.0.2.1]:22 "+string(ssh.MarshalAuthorizedKey(sshPub)))
}

// scrapeChecks scrapes metricsURL and returns checks_total by
// "provider/name/mode".
func scrapeChecks(t *testing.T, metricsURL string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", metricsURL, resp.Status, err)
	}
	line := regexp.MustCompile(`(?m)^provider_health_exporter_checks_total\{mode="(\w+)",name="([^"]+)",provider="(\w+)"\} (\S+)$`)
	out := map[string]float64{}
	for _, m := range line.FindAllStringSubmatch(string(body), -1) {
		var v float64
		if _, err := fmt.Sscan(m[4], &v); err != nil {
			t.Fatalf("checks_total value %q: %v", m[4], err)
		}
		out[m[3]+"/"+m[2]+"/"+m[1]] = v
	}
	if len(out) == 0 {
		t.Fatalf("no provider_health_exporter_checks_total in the scrape:\n%s", body)
	}
	return out
}

// checkRefreshCounts checks that between the checks_total of before and
// after, each entry counted two live checks (a refresh and the scrape that
// read after) and nothing else; heldBack, an entry that may be in backoff,
// counted two checks of any mode.
func checkRefreshCounts(t *testing.T, what string, entries []string, before, after map[string]float64, heldBack string) {
	t.Helper()
	for _, entry := range entries {
		delta := map[string]float64{}
		for _, mode := range exposition.Modes {
			delta[mode] = after[entry+"/"+mode] - before[entry+"/"+mode]
		}
		want := map[string]float64{exposition.ModeLive: 2, exposition.ModeShared: 0, exposition.ModeCached: 0, exposition.ModeBackoff: 0}
		if entry == heldBack {
			want[exposition.ModeLive], want[exposition.ModeBackoff] = delta[exposition.ModeLive], 2-delta[exposition.ModeLive]
		}
		if !maps.Equal(delta, want) {
			t.Errorf("%s: checks_total of %s rose by %v, want %v (the refresh's check and the reading scrape's)", what, entry, delta, want)
		}
	}
}

// awaitCondition polls cond until it holds, for at most browserWait.
func awaitCondition(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(browserWait)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not reached within %s; last state: %s", what, browserWait, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// --- the browser -------------------------------------------------------------

// startChromium starts headless Chromium with a fresh profile and returns
// the context of its tab; Chromium is closed at the end of the test. It
// fails the test, never skips it, when Chromium cannot start.
func startChromium(t *testing.T, artifacts string) context.Context {
	path := os.Getenv("CHROMIUM")
	if path == "" {
		path = "chromium"
	}
	exe, err := exec.LookPath(path)
	if err != nil {
		t.Fatalf("Chromium not found (%v): install the Debian package chromium (testdata/install-deps.sh does), or set $CHROMIUM to its path", err)
	}
	logPath := filepath.Join(artifacts, "chromium.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox, // as root, Chromium refuses to start with its sandbox
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// Without these Chromium reaches out to Google at start (QUIC,
		// component updates, sync, variations) and logs every failure.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		// Nothing resolves: the test only uses 127.0.0.1 addresses, and no
		// name Chromium looks up on its own can reach the resolver.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		// The window of a 1366x768 laptop screen, the narrowest the
		// page is made for: the fleet's page must fit it.
		chromedp.WindowSize(windowWidth, 768),
		chromedp.CombinedOutput(logFile),
	)
	// A fresh profile directory: chromedp creates one per browser and
	// removes it when the browser has exited.
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		// Close Chromium gracefully, then wait for it to exit.
		if err := chromedp.Cancel(ctx); err != nil {
			t.Logf("closing Chromium: %v", err)
		}
		cancelTab()
		cancelAlloc()
		logFile.Close()
	})
	// The first action starts Chromium, whose life is then bound to the
	// context it was given: ctx, not one with a deadline.
	if err := chromedp.Do(ctx); err != nil {
		out, _ := os.ReadFile(logPath)
		t.Fatalf("Chromium (%s) could not start: %v\nits output:\n%s", exe, err, out)
	}
	return ctx
}

// consoleLog collects what the pages write to the console: calls of the
// console API, uncaught exceptions and the browser's log (failed loads).
type consoleLog struct {
	ctx     context.Context
	mu      sync.Mutex
	msgs    []chromedp.ConsoleMessage
	checked int         // msgs[:checked] have been asserted on
	markers chan string // the checkpoint markers, as they arrive
}

// consoleMarker starts the messages the test writes to the console to
// know that every message before them has arrived.
const consoleMarker = "browser-test checkpoint "

func watchConsole(ctx context.Context) *consoleLog {
	c := &consoleLog{ctx: ctx, markers: make(chan string, 1)}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if strings.HasPrefix(m.Text, consoleMarker) {
				c.markers <- m.Text
				continue
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
		}
	}()
	return c
}

// assertNoErrors writes a marker to the console and waits for it, so that
// every message of the pages before it has arrived, then fails on any
// error, exception or failed load among the messages since the last call.
// With faviconOK, the 404 of /favicon.ico is no error: a browser asks for it
// for every document that is not HTML (metrics, JSON, YAML), which has no
// place to say that there is no icon.
func (c *consoleLog) assertNoErrors(t *testing.T, name string, faviconOK bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, browserWait)
	defer cancel()
	marker := consoleMarker + name
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf("console.info(%q)", marker))); err != nil {
		t.Fatalf("writing the console marker: %v", err)
	}
	for got := ""; got != marker; {
		select {
		case got = <-c.markers:
		case <-ctx.Done():
			t.Fatalf("the console marker %q did not arrive: %v", marker, ctx.Err())
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.msgs[c.checked:] {
		isError := m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException
		favicon := m.Source == "network" && strings.HasSuffix(m.URL, "/favicon.ico")
		if isError && (!faviconOK || !favicon) {
			t.Errorf("%s: console %s at %s:%d: %s", name, m.Type, m.URL, m.Line+1, m.Text)
		} else {
			t.Logf("%s: console %s at %s:%d: %s", name, m.Type, m.URL, m.Line+1, m.Text)
		}
	}
	c.checked = len(c.msgs)
}

// --- the page ----------------------------------------------------------------

// statusPage is the status page in the test's tab.
type statusPage struct {
	t      *testing.T
	ctx    context.Context
	base   string // http://127.0.0.1:port
	prefix string // the exporter's route prefix, "" for none
}

// pageRow is one target's row of the status table as the browser renders
// it.
type pageRow struct {
	ID           string            `json:"id"`      // name/target
	Section      string            `json:"section"` // the state of the section the row is in
	Class        string            `json:"class"`
	Cells        []string          `json:"cells"`        // innerText of each cell, the message's without its details, the target's without its probe links
	Details      map[string]string `json:"details"`      // the details under the message
	Domains      []string          `json:"domains"`      // the failure domains under the message and the details
	DetailsShown bool              `json:"detailsShown"` // whether the browser shows them
	Titles       []string          `json:"titles"`       // title attribute of each cell
	StateBg      []string          `json:"stateBg"`      // computed background of the td.state cells
	Transitions  []transition      `json:"transitions"`  // the lines of the transitions cell
}

type transition struct {
	Title string `json:"title"`
	Text  string `json:"text"`
}

const rowsJS = `Array.from(document.querySelectorAll('#targets tr[data-target]')).map(tr => ({
	id: tr.dataset.name + '/' + tr.dataset.target,
	section: tr.parentElement.className,
	class: tr.className,
	cells: Array.from(tr.cells).map(td => {
		if (td.classList.contains('target')) {
			return td.lastChild.textContent;
		}
		// The message without the lines under it: the domains (last),
		// then the details.
		let text = td.innerText;
		for (const d of [td.querySelector('div.domains'), td.querySelector('div.facts')]) {
			if (d) {
				text = text.slice(0, -d.innerText.length).replace(/\s$/, '');
			}
		}
		return text;
	}),
	domains: Array.from(tr.querySelectorAll('td.message div.domains span')).map(s => s.textContent),
	details: Object.fromEntries(Array.from(tr.querySelectorAll('td.message div.facts span')).map(s => {
		const i = s.textContent.indexOf(': ');
		return [s.textContent.slice(0, i), s.textContent.slice(i + 2)];
	})),
	detailsShown: Array.from(tr.querySelectorAll('td.message div.facts')).every(d => d.checkVisibility()),
	titles: Array.from(tr.cells).map(td => td.title),
	stateBg: Array.from(tr.querySelectorAll('td.state')).map(td => getComputedStyle(td).backgroundColor),
	// The text, shown or not: a Ready row shows its last transition only,
	// without the reason it came from.
	transitions: Array.from(tr.querySelectorAll('td.transitions div')).map(d => ({title: d.title, text: d.textContent.replace(/\s+/g, ' ').trim()})),
}))`

func browserValue[T any](p *statusPage, what string, a chromedp.Action[T]) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserWait)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// open loads url and fails unless the document answers 200.
func (p *statusPage) open(url string) {
	p.t.Helper()
	resp := browserValue(p, "open "+url, chromedp.NavigateResponse(url))
	if resp.Status != http.StatusOK {
		p.t.Fatalf("open %s: status %d", url, resp.Status)
	}
}

func (p *statusPage) location() string {
	p.t.Helper()
	return browserValue(p, "location", chromedp.Location())
}

func (p *statusPage) rows() []pageRow {
	p.t.Helper()
	return browserValue(p, "reading the status table", chromedp.Evaluate[[]pageRow](rowsJS))
}

func (p *statusPage) screenshot(path string) {
	p.t.Helper()
	png := browserValue(p, "screenshot", chromedp.FullScreenshot(100))
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		p.t.Fatalf("the screenshot is not a PNG")
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s", path)
}

// clickRefresh clicks the page's refresh button and waits for the page it
// loads.
func (p *statusPage) clickRefresh() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserWait)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("#refresh button[type=submit]")))
	if err != nil {
		p.t.Fatalf("clicking the refresh button: %v", err)
	}
	if resp.Status != http.StatusOK || !strings.HasPrefix(resp.URL, p.base+p.prefix+"/?") {
		p.t.Fatalf("the refresh button loaded %s: status %d", resp.URL, resp.Status)
	}
}

// status reads /api/v1/status, which checks nothing.
func (p *statusPage) status() []statusProvider {
	p.t.Helper()
	resp, err := http.Get(p.base + p.prefix + "/api/v1/status")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Providers []statusProvider `json:"providers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		p.t.Fatalf("/api/v1/status: %v", err)
	}
	return st.Providers
}

// checkStampsJS reads, per checked row of the page, the time of the
// check it shows (the title of its "last check" cell, RFC 3339).
const checkStampsJS = `Object.fromEntries(Array.from(document.querySelectorAll('#targets tr[data-target]')).filter(tr => tr.children.length >= 9).map(tr =>
	[tr.dataset.name + '/' + tr.dataset.target, tr.children[8].title]))`

// openAtStatus opens url and returns /api/v1/status read after it, of the
// same verdicts as the page: every checked row shows the check time the
// status gives its target. Where a check ran between the page and the
// status (a live capacity such as free memory may then differ), it opens
// the page again, up to maxSettle times: checks of a few seconds' period
// leave most reads between two of them, however slow the machine.
func (p *statusPage) openAtStatus(url string) []statusProvider {
	p.t.Helper()
	const maxSettle = 30
	var moved []string
	for range maxSettle {
		p.open(url)
		shown := browserValue(p, "reading the rows' check times", chromedp.Evaluate[map[string]string](checkStampsJS))
		status := p.status()
		moved = moved[:0]
		for _, sp := range status {
			for _, tg := range sp.Targets {
				id := sp.Name + "/" + tg.Target
				stamp, ok := shown[id]
				if !ok {
					continue // not on the page, or never checked there
				}
				want := ""
				if tg.LastCheckTime != nil {
					want = tg.LastCheckTime.Format(time.RFC3339)
				}
				if stamp != want {
					moved = append(moved, fmt.Sprintf("%s: page %q, status %q", id, stamp, want))
				}
			}
		}
		if len(moved) == 0 {
			return status
		}
	}
	p.t.Fatalf("%s: in %d tries, a check ran between the page and /api/v1/status every time; last: %q", url, maxSettle, moved)
	return nil
}

// stateOf is the state of a target of /api/v1/status, the class of its
// row and the section it is listed in.
func stateOf(tg statusTarget) string {
	switch {
	case !tg.Checked:
		return "unchecked"
	case tg.Ready:
		return "ready"
	case tg.Up:
		return "notready"
	default:
		return "down"
	}
}

// pageOrder is the order of the page's sections: the targets that are not
// ready first.
var pageOrder = []string{"notready", "down", "unchecked", "ready"}

// compareWithStatus checks every row against /api/v1/status: one row per
// target, in the section of its state, the sections in pageOrder and the
// configuration's order within each, each row showing the target's ready
// state, reason, message, check times, duration and transitions.
func (p *statusPage) compareWithStatus(rows []pageRow) {
	t := p.t
	t.Helper()
	backoffNote := regexp.MustCompile(`^\ndials keep failing: not redialed before \S+$`)
	status := p.status()
	var wantOrder, gotOrder []string
	for _, state := range pageOrder {
		for _, sp := range status {
			for _, tg := range sp.Targets {
				if stateOf(tg) == state {
					wantOrder = append(wantOrder, state+" "+sp.Name+"/"+tg.Target)
				}
			}
		}
	}
	byID := map[string]pageRow{}
	for _, r := range rows {
		gotOrder = append(gotOrder, r.Section+" "+r.ID)
		byID[r.ID] = r
	}
	if !slices.Equal(gotOrder, wantOrder) {
		t.Errorf("the rows by section, in page order:\n%.2000q\nwant, from /api/v1/status:\n%.2000q", gotOrder, wantOrder)
	}
	i := 0
	for _, sp := range status {
		for _, tg := range sp.Targets {
			id := sp.Name + "/" + tg.Target
			r, ok := byID[id]
			if !ok {
				t.Errorf("no row for %s", id)
				continue
			}
			i++
			if r.Class != stateOf(tg) {
				t.Errorf("%s: class %q, want %q", id, r.Class, stateOf(tg))
			}
			if len(r.Cells) != 11 {
				t.Errorf("%s: %d cells, want 11: %+v", id, len(r.Cells), r)
				continue
			}
			// After the reason, the capacity where one is known: the
			// number and the constraint that binds it, in full.
			capacity := tg.CapacityText()
			if capacity != "" && tg.CapacityBinding != "" {
				capacity += " " + tg.CapacityBinding
			}
			want := []string{sp.Provider, sp.Name, tg.Target, map[bool]string{true: "yes", false: "no"}[tg.Ready], string(tg.Reason), capacity}
			if !slices.Equal(r.Cells[:6], want) {
				t.Errorf("%s: cells %q, want %q", id, r.Cells[:6], want)
			}
			if msg, ok := strings.CutPrefix(r.Cells[6], tg.Message); !ok || msg != "" && !backoffNote.MatchString(msg) {
				t.Errorf("%s: message %q, want %q", id, r.Cells[6], tg.Message)
			}
			// The details with a value: an empty one is left out.
			if want := shownDetails(tg.Details); !maps.Equal(r.Details, want) || !r.DetailsShown {
				t.Errorf("%s: details %q (shown: %v), want %q shown", id, r.Details, r.DetailsShown, want)
			}
			// The failure domains, as the page writes them.
			var wantDomains []string
			for _, d := range tg.ShownDomains() {
				wantDomains = append(wantDomains, d.Text)
			}
			if !slices.Equal(r.Domains, wantDomains) {
				t.Errorf("%s: domains %q, want %q", id, r.Domains, wantDomains)
			}
			if r.Titles[2] != tg.Address || r.Titles[7] != stamp(tg.LastTransitionTime) || r.Titles[8] != stamp(tg.LastCheckTime) {
				t.Errorf("%s: titles (address, since, last check) %q, want %q, %q, %q", id, r.Titles, tg.Address, stamp(tg.LastTransitionTime), stamp(tg.LastCheckTime))
			}
			if want := trimFloat(tg.DurationSeconds) + "s"; r.Cells[9] != want {
				t.Errorf("%s: duration %q, want %q", id, r.Cells[9], want)
			}
			var wantTr []transition
			for _, tr := range tg.Transitions {
				from := cmp.Or(string(tr.From), "never checked")
				wantTr = append(wantTr, transition{Title: tr.Time.Format(time.RFC3339), Text: tr.Time.Format("15:04:05") + " " + from + " → " + string(tr.To)})
			}
			if !slices.Equal(r.Transitions, wantTr) {
				t.Errorf("%s: transitions %+v, want %+v", id, r.Transitions, wantTr)
			}
		}
	}
	if i != len(rows) {
		t.Errorf("the table has %d rows, /api/v1/status %d targets", len(rows), i)
	}
}

// shownDetails are the details of d with a value, those the page shows;
// nil when none has one.
func shownDetails(d map[string]string) map[string]string {
	var out map[string]string
	for k, v := range d {
		if v != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

func stamp(tm *time.Time) string {
	if tm == nil {
		return ""
	}
	return tm.Format(time.RFC3339)
}

// checkExpected checks the verdicts the page shows against what the test
// set up, so that the comparison with /api/v1/status is not between two
// wrong answers.
func (p *statusPage) checkExpected(rows []pageRow) {
	t := p.t
	t.Helper()
	want := map[string]struct {
		class, ready, reason, message string
		transitions                   []string
	}{
		gcpReadyName + "/compute": {"ready", "yes", "Ready", "", []string{"never checked → Ready"}},
		gcpFlakyName + "/compute": {"notready", "no", "Forbidden", "compute.instances.list", []string{"never checked → Ready", "Ready → Forbidden"}},
		kubeName + "/apiserver":   {"down", "no", "Unreachable", "connection refused", []string{"never checked → Unreachable"}},
		kvmName + "/" + kvmHost:   {"down", "no", "Unreachable", "connection refused", []string{"never checked → Unreachable"}},
	}
	for _, r := range rows {
		if len(r.Cells) != 11 {
			continue // reported by compareWithStatus
		}
		id := r.Cells[1] + "/" + r.Cells[2]
		w, ok := want[id]
		if !ok {
			t.Errorf("unexpected row %s", id)
			continue
		}
		delete(want, id)
		var transitions []string
		for _, tr := range r.Transitions {
			_, text, _ := strings.Cut(tr.Text, " ")
			transitions = append(transitions, text)
		}
		if r.Class != w.class || r.Cells[3] != w.ready || r.Cells[4] != w.reason || !strings.Contains(r.Cells[6], w.message) || !slices.Equal(transitions, w.transitions) {
			t.Errorf("%s: class %q ready %q reason %q message %q transitions %q; want %q %q %q, a message with %q, transitions %q",
				id, r.Class, r.Cells[3], r.Cells[4], r.Cells[6], transitions, w.class, w.ready, w.reason, w.message, w.transitions)
		}
	}
	for id := range want {
		t.Errorf("no row for %s", id)
	}
}

// checkColours checks that each state has its own background colour, the
// same in every row of that state.
func checkColours(t *testing.T, rowSets ...[]pageRow) {
	t.Helper()
	byClass := map[string]map[string]bool{}
	for _, rows := range rowSets {
		for _, r := range rows {
			if byClass[r.Class] == nil {
				byClass[r.Class] = map[string]bool{}
			}
			for _, bg := range r.StateBg {
				byClass[r.Class][bg] = true
			}
		}
	}
	classOf := map[string]string{}
	for _, class := range []string{"unchecked", "ready", "notready", "down"} {
		colours := byClass[class]
		if len(colours) != 1 {
			t.Errorf("state %s: backgrounds %v, want one colour", class, colours)
			continue
		}
		for bg := range colours {
			if bg == "rgba(0, 0, 0, 0)" || bg == "transparent" {
				t.Errorf("state %s has no background colour", class)
			}
			if other, ok := classOf[bg]; ok {
				t.Errorf("states %s and %s share the colour %s", other, class, bg)
			}
			classOf[bg] = class
		}
	}
}

// followLinks opens every link of the page in the browser: each must
// answer 200 under the route prefix, and the page must have links to the
// metrics, the status as JSON, the configuration, a probe and a debug link
// per target, and the summary's and the entry headings' links that select
// targets (filterLink); no other link.
func (p *statusPage) followLinks() {
	t := p.t
	t.Helper()
	links := browserValue(p, "reading the links", chromedp.Evaluate[[]string](`Array.from(document.links).map(a => a.href)`))
	want := map[string]bool{
		p.base + p.prefix + "/metrics":       false,
		p.base + p.prefix + "/api/v1/status": false,
		p.base + p.prefix + "/config":        false,
	}
	for _, probe := range []string{
		p.probeURL(gcpReadyName, "compute"), p.probeURL(gcpFlakyName, "compute"),
		p.probeURL(kubeName, "apiserver"), p.probeURL(kvmName, kvmHost),
	} {
		want[probe], want[probe+"&debug=true"] = false, false
	}
	page := p.base + p.prefix + "/"
	for _, filter := range []string{"?provider=gcp", "?provider=gcp&reason=Forbidden", "?provider=kvm&state=down",
		"?reason=Unreachable", "?state=ready", "?name=" + kvmName} {
		want[page+filter] = false
	}
	isFilter := func(link string) bool {
		query, ok := strings.CutPrefix(strings.TrimPrefix(link, page), "?")
		if !ok {
			return link == page
		}
		q, err := url.ParseQuery(query)
		if err != nil || len(q) == 0 {
			return false
		}
		for k := range q {
			if !slices.Contains([]string{"provider", "name", "reason", "state"}, k) {
				return false
			}
		}
		return true
	}
	slices.Sort(links)
	for _, link := range slices.Compact(links) {
		if _, ok := want[link]; !ok && !isFilter(link) {
			t.Errorf("unexpected link %s", link)
		}
		want[link] = true
		ctx, cancel := context.WithTimeout(p.ctx, browserWait)
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(link))
		cancel()
		switch {
		case err != nil:
			t.Errorf("link %s: %v", link, err)
		case resp.Status != http.StatusOK:
			t.Errorf("link %s: status %d", link, resp.Status)
		}
	}
	for link, seen := range want {
		if !seen {
			t.Errorf("the page has no link to %s; its links: %q", link, links)
		}
	}
}

func (p *statusPage) probeURL(name, target string) string {
	return p.base + p.prefix + "/probe?name=" + name + "&target=" + target
}

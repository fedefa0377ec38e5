package main

import (
	"cmp"
	"fmt"
	"html/template"
	"iter"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The status page's view of the last verdicts (docs/configuration.md: "HTTP
// endpoints"): a summary per provider, then the targets in sections by
// state, the ones that are not ready first, each entry of a kind with
// several targets (a KVM entry's hosts) under a heading of its own. The
// query parameters select what the table shows; the summary always counts
// every target, so a filtered page still says how the whole fleet is.

// The states of a target, in the order of the page's sections: those that
// need someone first. They say what the metrics say: a target not ready
// has provider_health_ready 0, whether its provider answered (a section
// of its own) or not (down: provider_health_up 0 too), so that the filter
// state=notready selects both, and state=down the second
// (docs/configuration.md: "HTTP endpoints").
const (
	stateNotReady  = "notready"  // ready 0; the section: the provider answered (up 1)
	stateDown      = "down"      // ready 0 and up 0: the provider did not answer
	stateUnchecked = "unchecked" // no verdict yet
	stateReady     = "ready"
)

// pageStates are the states with their section titles and the words of
// the state filter, in page order.
var pageStates = []struct{ value, title, words string }{
	{stateNotReady, "Not ready, up: the provider answered, but cannot host proxies", "not ready (ready 0, down included)"},
	{stateDown, "Not ready, down: the provider did not answer", "down (up 0)"},
	{stateUnchecked, "Never checked", "never checked"},
	{stateReady, "Ready", "ready"},
}

// sectionWords are the words of an entry heading for the targets of a
// section.
var sectionWords = map[string]string{
	stateNotReady: "not ready, up", stateDown: "down", stateUnchecked: "never checked", stateReady: "ready",
}

func targetState(t statusTarget) string {
	switch {
	case !t.Checked:
		return stateUnchecked
	case t.Ready:
		return stateReady
	case t.Up:
		return stateNotReady
	default:
		return stateDown
	}
}

// CapacityText is the target's capacity as the page writes it, "" when
// none is known.
func (t statusTarget) CapacityText() string {
	if t.Capacity == nil {
		return ""
	}
	return strconv.FormatInt(*t.Capacity, 10)
}

// shownDomain is one failure domain as the page writes it.
type shownDomain struct {
	Text string
	// Short is set when losing the domain leaves some of its proxies
	// without a place: the page marks it.
	Short bool
}

// ShownDomains are the target's failure domains as the page writes them,
// "zone-a: 12 fit, 5 proxies, after loss −3", those whose loss hurts most
// first (least after loss; those without one last, in the kind's order):
// a Ready row shows them on one line, cut at the cell's width, and its
// start must say whether the entry survives losing a domain.
func (t statusTarget) ShownDomains() []shownDomain {
	if len(t.Domains) == 0 {
		return nil
	}
	ds := slices.Clone(t.Domains)
	slices.SortStableFunc(ds, func(a, b statusDomain) int {
		switch {
		case a.AfterLoss != nil && b.AfterLoss != nil:
			return cmp.Compare(*a.AfterLoss, *b.AfterLoss)
		case a.AfterLoss != nil:
			return -1
		case b.AfterLoss != nil:
			return 1
		}
		return 0
	})
	out := make([]shownDomain, len(ds))
	for i, d := range ds {
		text := d.Domain + ": " + thousands64(d.Capacity) + " fit, " + thousands64(d.Proxies) + " proxies"
		if d.AfterLoss != nil {
			text += ", after loss " + signed(*d.AfterLoss)
		}
		out[i] = shownDomain{Text: text, Short: d.AfterLoss != nil && *d.AfterLoss < 0}
	}
	return out
}

// signed writes n as thousands64 does, with a minus sign (U+2212) when it
// is negative: an after-loss figure below zero is the proxies left
// without a place.
func signed(n int64) string {
	if n < 0 {
		return "\u2212" + thousands64(-n)
	}
	return thousands64(n)
}

// pageFilter is what the page's query parameters select; "" selects all.
type pageFilter struct {
	Provider, Name, Reason, State string
}

// Active reports whether the filter leaves anything out.
func (f pageFilter) Active() bool { return f != pageFilter{} }

func (f pageFilter) matches(provider, name string, t statusTarget) bool {
	return (f.Provider == "" || f.Provider == provider) &&
		(f.Name == "" || f.Name == name) &&
		(f.Reason == "" || t.Checked && string(t.Reason) == f.Reason) &&
		(f.State == "" || inState(f.State, targetState(t)))
}

// inState reports whether a target in the page's section state is
// selected by the state filter want: notready is every target whose
// ready is 0, down ones included.
func inState(want, state string) bool {
	return want == state || want == stateNotReady && state == stateDown
}

// Query is the filter as query parameters, without the empty ones.
func (f pageFilter) Query() url.Values {
	q := url.Values{}
	for _, kv := range [][2]string{{"provider", f.Provider}, {"name", f.Name}, {"reason", f.Reason}, {"state", f.State}} {
		if kv[1] != "" {
			q.Set(kv[0], kv[1])
		}
	}
	return q
}

// parseFilter reads the filter from q. A value that can match nothing the
// exporter could ever show (a kind, reason or state that does not exist)
// is an error naming the parameter, as an unknown name is; a known reason
// no target has now merely shows no rows. names are the configured entries.
func parseFilter(q url.Values, kinds []provider.Kind, names []string) (pageFilter, error) {
	f := pageFilter{Provider: q.Get("provider"), Name: q.Get("name"), Reason: q.Get("reason"), State: q.Get("state")}
	var kindNames []string
	reasonKnown := false
	for _, k := range kinds {
		kindNames = append(kindNames, k.Name())
		reasonKnown = reasonKnown || k.Reasons().Contains(provider.Reason(f.Reason))
	}
	var states []string
	for _, s := range pageStates {
		states = append(states, s.value)
	}
	switch {
	case f.Provider != "" && !slices.Contains(kindNames, f.Provider):
		return f, fmt.Errorf("provider=%s: not a kind of provider; want one of %s", provider.Echo(f.Provider), strings.Join(kindNames, ", "))
	case f.Name != "" && !slices.Contains(names, f.Name):
		return f, fmt.Errorf("name=%s: no entry of that name is configured", provider.Echo(f.Name))
	case f.Reason != "" && !reasonKnown:
		return f, fmt.Errorf("reason=%s: no kind of provider has that reason (docs/metrics.md lists them)", provider.Echo(f.Reason))
	case f.State != "" && !slices.Contains(states, f.State):
		return f, fmt.Errorf("state=%s: want one of %s", provider.Echo(f.State), strings.Join(states, ", "))
	}
	return f, nil
}

// reasonCount is how many targets have a reason.
type reasonCount struct {
	Reason provider.Reason
	Count  int
}

// reasonCounts tallies reasons, the most frequent first, then by name.
type reasonCounts map[provider.Reason]int

func (c reasonCounts) sorted() []reasonCount {
	out := make([]reasonCount, 0, len(c))
	for r, n := range c {
		out = append(out, reasonCount{r, n})
	}
	slices.SortFunc(out, func(a, b reasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Reason, b.Reason))
	})
	return out
}

// summaryRow counts the targets of one provider (kind), or of all of them.
// NotReady counts every target whose ready is 0, Down those of them whose
// up is 0 too; NotReadyBy are the reasons of the others (up 1), DownBy
// those of the down ones.
type summaryRow struct {
	Provider                           string
	Entries, Targets, Ready, Unchecked int
	NotReady, Down                     int
	NotReadyBy, DownBy                 []reasonCount
	notReadyBy, downBy                 reasonCounts
	// Capacity is the sum of the capacities known (how many more proxies
	// the provider's targets take in all), Least the least of them, of
	// CapacityTargets targets; none known when CapacityTargets is 0.
	Capacity, Least int64
	CapacityTargets int
}

func (s *summaryRow) add(t statusTarget, c provider.Capacity) {
	s.Targets++
	switch targetState(t) {
	case stateReady:
		s.Ready++
	case stateUnchecked:
		s.Unchecked++
	case stateNotReady:
		s.NotReady++
		s.notReadyBy[t.Reason]++
	case stateDown:
		s.NotReady++
		s.Down++
		s.downBy[t.Reason]++
	}
	if !t.Checked || !c.Known {
		return
	}
	// Each capacity is at most provider.MaxCapacity (2^53): the sum
	// stops there too rather than overflow.
	s.Capacity = min(s.Capacity+c.Proxies, provider.MaxCapacity)
	if s.CapacityTargets == 0 || c.Proxies < s.Least {
		s.Least = c.Proxies
	}
	s.CapacityTargets++
}

// Up counts the targets not ready whose provider answered (up 1).
func (s summaryRow) Up() int { return s.NotReady - s.Down }

func newSummaryRow(provider string) *summaryRow {
	return &summaryRow{Provider: provider, notReadyBy: reasonCounts{}, downBy: reasonCounts{}}
}

// tableRow is one target's row.
type tableRow struct {
	Provider, Name string
	State          string
	statusTarget
}

// pageGroup is the rows of one entry within a section. Header is set for
// the entries of a kind with several targets per entry: their hosts are
// listed under a heading row naming the entry.
type pageGroup struct {
	Provider, Name string
	Header         bool
	Size           int // targets of the entry, in every section
	Count          int // rows of the entry in this section
	By             []reasonCount
	// result holds the rows' targets, at the indices of targets.
	result  *engine.ProviderResult
	targets []int
}

// Rows are the group's rows, each shaped only when the template writes
// it: the page streams row by row, and a request holds one row's message
// and details at a time, not the whole fleet's (docs/security.md:
// "Strings, labels and pages").
func (g pageGroup) Rows() iter.Seq[tableRow] {
	return func(yield func(tableRow) bool) {
		for _, i := range g.targets {
			t := newStatusTarget(*g.result, g.result.Targets[i])
			if !yield(tableRow{Provider: g.Provider, Name: g.Name, State: targetState(t), statusTarget: t}) {
				return
			}
		}
	}
}

// pageSection is the rows of one state.
type pageSection struct {
	State, Title, Words string
	Count               int
	Groups              []pageGroup
}

// option is one choice of a filter's select element.
type option struct {
	Value, Label string
	Selected     bool
}

// pageView is everything the template shows of the verdicts. The entry
// filter is a text field: a choice per entry made every page grow with
// the fleet (60 KiB at a thousand entries).
type pageView struct {
	Summary     []summaryRow
	Total       summaryRow
	Sections    []pageSection
	Shown       int // targets the filter selects
	Filter      pageFilter
	FilterQuery string // the filter as a query, for the refresh form
	Providers   []option
	Reasons     []option
	States      []option
}

// pageBuilder gathers the page's view provider by provider.
type pageBuilder struct {
	f         pageFilter
	multi     map[string]bool // kinds with several targets per entry
	byKind    map[string]*summaryRow
	kindOrder []string
	total     *summaryRow
	reasons   reasonCounts // of every checked target, for the reason filter
	groups    map[string][]pageGroup
	shown     int
}

// buildPage shapes the verdicts of providers for the page: the summary of
// all of them, and the targets f selects. It reads only each target's
// state and reason; the rows are shaped as they are written
// (pageGroup.Rows).
func buildPage(providers []engine.ProviderResult, kinds []provider.Kind, f pageFilter) pageView {
	b := &pageBuilder{f: f, multi: map[string]bool{}, byKind: map[string]*summaryRow{},
		total: newSummaryRow(""), reasons: reasonCounts{}, groups: map[string][]pageGroup{}}
	for _, k := range kinds {
		b.multi[k.Name()] = k.MultiTarget()
	}
	for pi := range providers {
		b.add(&providers[pi])
	}
	v := pageView{Filter: f, FilterQuery: f.Query().Encode(), Shown: b.shown}
	for _, k := range b.kindOrder {
		s := b.byKind[k]
		s.NotReadyBy, s.DownBy = s.notReadyBy.sorted(), s.downBy.sorted()
		v.Summary = append(v.Summary, *s)
	}
	b.total.NotReadyBy, b.total.DownBy = b.total.notReadyBy.sorted(), b.total.downBy.sorted()
	v.Total = *b.total
	for _, st := range pageStates {
		if gs := b.groups[st.value]; len(gs) > 0 {
			sec := pageSection{State: st.value, Title: st.title, Words: sectionWords[st.value], Groups: gs}
			for _, g := range gs {
				sec.Count += g.Count
			}
			v.Sections = append(v.Sections, sec)
		}
	}
	v.Providers, v.Reasons, v.States = b.options(kinds)
	return v
}

// add counts the targets of p in the summary and puts those the filter
// selects in the groups of their states.
func (b *pageBuilder) add(p *engine.ProviderResult) {
	s := b.byKind[p.Kind]
	if s == nil {
		s = newSummaryRow(p.Kind)
		b.byKind[p.Kind] = s
		b.kindOrder = append(b.kindOrder, p.Kind)
	}
	s.Entries++
	b.total.Entries++
	inState := map[string]*pageGroup{}
	counts := map[string]reasonCounts{}
	for ti, tr := range p.Targets {
		t := verdictOf(*p, tr)
		s.add(t, tr.Capacity)
		b.total.add(t, tr.Capacity)
		if t.Checked {
			b.reasons[t.Reason]++
		}
		if !b.f.matches(p.Kind, p.Name, t) {
			continue
		}
		b.shown++
		state := targetState(t)
		g := inState[state]
		if g == nil {
			g = &pageGroup{Provider: p.Kind, Name: p.Name, Header: b.multi[p.Kind], Size: len(p.Targets), result: p}
			inState[state] = g
			counts[state] = reasonCounts{}
		}
		g.Count++
		g.targets = append(g.targets, ti)
		if t.Checked {
			counts[state][t.Reason]++
		}
	}
	for _, st := range pageStates {
		if g := inState[st.value]; g != nil {
			g.By = counts[st.value].sorted()
			b.groups[st.value] = append(b.groups[st.value], *g)
		}
	}
}

// options are the choices of the provider, reason and state filters: the
// kinds configured, the reasons the targets have now, the states; each
// with the one selected even when nothing has it any more.
func (b *pageBuilder) options(kinds []provider.Kind) (providers, reasons, states []option) {
	f := b.f
	for _, k := range kinds {
		if b.byKind[k.Name()] != nil || k.Name() == f.Provider {
			providers = append(providers, option{Value: k.Name(), Label: k.Name(), Selected: k.Name() == f.Provider})
		}
	}
	if _, ok := b.reasons[provider.Reason(f.Reason)]; !ok && f.Reason != "" {
		b.reasons[provider.Reason(f.Reason)] = 0
	}
	for _, rc := range b.reasons.sorted() {
		reasons = append(reasons, option{Value: string(rc.Reason), Label: string(rc.Reason) + " (" + thousands(rc.Count) + ")", Selected: string(rc.Reason) == f.Reason})
	}
	for _, st := range pageStates {
		states = append(states, option{Value: st.value, Label: st.words, Selected: st.value == f.State})
	}
	return providers, reasons, states
}

// detail is one of a target's details as the page writes it.
type detail struct{ Key, Value string }

// ShownDetails are the target's details the page shows, by key: those
// with a value. An empty one (the libvirt version of a host never
// reached) says nothing but takes room on each of a thousand rows;
// /api/v1/status keeps it.
func (t statusTarget) ShownDetails() []detail {
	var out []detail
	for _, k := range slices.Sorted(maps.Keys(t.Details)) {
		if v := t.Details[k]; v != "" {
			out = append(out, detail{k, v})
		}
	}
	return out
}

// thousands writes n with a comma between groups of three digits, as a
// reader of a thousand-host fleet's counts expects.
func thousands(n int) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// SummaryRows are the summary's rows: one per provider, and the sum of
// them (Provider "") when there are several.
func (v pageView) SummaryRows() []summaryRow {
	if len(v.Summary) < 2 {
		return v.Summary
	}
	return append(slices.Clone(v.Summary), v.Total)
}

// CapacityText is the sum of the summary's capacities known as the page
// writes it, "" when none is.
func (s summaryRow) CapacityText() string {
	if s.CapacityTargets == 0 {
		return ""
	}
	return thousands64(s.Capacity)
}

// LeastText is the least capacity known, "" when none is.
func (s summaryRow) LeastText() string {
	if s.CapacityTargets == 0 {
		return ""
	}
	return thousands64(s.Least)
}

func thousands64(n int64) string {
	if n > math.MaxInt {
		return strconv.FormatInt(n, 10)
	}
	return thousands(int(n))
}

// breakable writes s with a line-break opportunity (<wbr>) between its
// words only: at a CamelCase word's capitals ("Host|Key|Mismatch",
// "API|Disabled") and after '_', '-', '/', '.' ("IN_|USE_|ADDRESSES"). The
// cells of reasons and capacities break nowhere else (overflow-wrap:
// normal), so that no reason or quota name is cut inside a word
// (docs/configuration.md: "HTTP endpoints").
func breakable(s string) template.HTML {
	var b strings.Builder
	rs := []rune(s)
	start := 0
	for i := 1; i < len(rs); i++ {
		prev, r := rs[i-1], rs[i]
		next := rune(0)
		if i+1 < len(rs) {
			next = rs[i+1]
		}
		camel := unicode.IsUpper(r) && (unicode.IsLower(prev) || unicode.IsUpper(prev) && unicode.IsLower(next))
		after := strings.ContainsRune("_-/.", prev) && r != ' '
		if camel || after {
			b.WriteString(template.HTMLEscapeString(string(rs[start:i])))
			b.WriteString("<wbr>")
			start = i
		}
	}
	b.WriteString(template.HTMLEscapeString(string(rs[start:])))
	return template.HTML(b.String()) // every piece is escaped above
}

// filterLink is the query of a link that selects what kv (key, value, ...)
// names, leaving out empty values: "?provider=kvm&reason=Unreachable".
func filterLink(kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

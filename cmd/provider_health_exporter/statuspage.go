package main

import (
	"cmp"
	"fmt"
	"iter"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/egress-proxies/provider_health_exporter/collector"
)

// The status page's view of the last verdicts (docs/configuration.md: "HTTP
// endpoints"): a summary per provider, then the targets in sections by
// state, the ones that are not ready first, each entry of a kind with
// several targets (a KVM entry's hosts) under a heading of its own. The
// query parameters select what the table shows; the summary always counts
// every target, so a filtered page still says how the whole fleet is.

// The states of a target, in the order of the page's sections: those that
// need someone first.
const (
	stateNotReady  = "notready"  // the provider answered, but cannot host proxies
	stateDown      = "down"      // the provider did not answer
	stateUnchecked = "unchecked" // no verdict yet
	stateReady     = "ready"
)

// pageStates are the states with their section titles, in page order.
var pageStates = []struct{ value, title, words string }{
	{stateNotReady, "Not ready: the provider answered, but cannot host proxies", "not ready"},
	{stateDown, "Down: the provider did not answer", "down"},
	{stateUnchecked, "Never checked", "never checked"},
	{stateReady, "Ready", "ready"},
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
		(f.State == "" || f.State == targetState(t))
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
func parseFilter(q url.Values, kinds []collector.Kind, names []string) (pageFilter, error) {
	f := pageFilter{Provider: q.Get("provider"), Name: q.Get("name"), Reason: q.Get("reason"), State: q.Get("state")}
	var kindNames []string
	reasonKnown := false
	for _, k := range kinds {
		kindNames = append(kindNames, k.Name())
		reasonKnown = reasonKnown || k.Reasons().Contains(collector.Reason(f.Reason))
	}
	var states []string
	for _, s := range pageStates {
		states = append(states, s.value)
	}
	switch {
	case f.Provider != "" && !slices.Contains(kindNames, f.Provider):
		return f, fmt.Errorf("provider=%s: not a kind of provider; want one of %s", collector.Echo(f.Provider), strings.Join(kindNames, ", "))
	case f.Name != "" && !slices.Contains(names, f.Name):
		return f, fmt.Errorf("name=%s: no entry of that name is configured", collector.Echo(f.Name))
	case f.Reason != "" && !reasonKnown:
		return f, fmt.Errorf("reason=%s: no kind of provider has that reason (docs/metrics.md lists them)", collector.Echo(f.Reason))
	case f.State != "" && !slices.Contains(states, f.State):
		return f, fmt.Errorf("state=%s: want one of %s", collector.Echo(f.State), strings.Join(states, ", "))
	}
	return f, nil
}

// reasonCount is how many targets have a reason.
type reasonCount struct {
	Reason collector.Reason
	Count  int
}

// reasonCounts tallies reasons, the most frequent first, then by name.
type reasonCounts map[collector.Reason]int

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
type summaryRow struct {
	Provider                           string
	Entries, Targets, Ready, Unchecked int
	NotReady, Down                     int
	NotReadyBy, DownBy                 []reasonCount
	notReadyBy, downBy                 reasonCounts
}

func (s *summaryRow) add(t statusTarget) {
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
		s.Down++
		s.downBy[t.Reason]++
	}
}

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
	result  *collector.ProviderResult
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
func buildPage(providers []collector.ProviderResult, kinds []collector.Kind, f pageFilter) pageView {
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
			sec := pageSection{State: st.value, Title: st.title, Words: st.words, Groups: gs}
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
func (b *pageBuilder) add(p *collector.ProviderResult) {
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
		s.add(t)
		b.total.add(t)
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
func (b *pageBuilder) options(kinds []collector.Kind) (providers, reasons, states []option) {
	f := b.f
	for _, k := range kinds {
		if b.byKind[k.Name()] != nil || k.Name() == f.Provider {
			providers = append(providers, option{Value: k.Name(), Label: k.Name(), Selected: k.Name() == f.Provider})
		}
	}
	if _, ok := b.reasons[collector.Reason(f.Reason)]; !ok && f.Reason != "" {
		b.reasons[collector.Reason(f.Reason)] = 0
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

package docgen

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/egress-proxies/provider_health_exporter/internal/mdlinks"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// sectionLink is the link to kind k's section of docs/configuration.md,
// from the repository's root.
func sectionLink(k provider.Kind) string {
	return fmt.Sprintf("[%s](%s#%s)", k.Doc().Title, ConfigDoc, mdlinks.Slug(k.Doc().Title))
}

// readmeParts: the README's smallest file, a section per kind, and the
// links to the kinds' sections.
func readmeParts(kinds []provider.Kind) map[string]string {
	var b strings.Builder
	b.WriteString("```yaml\n")
	links := make([]string, len(kinds))
	for i, k := range kinds {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s:\n%s", k.Name(), ensureNewline(k.Doc().Example))
		links[i] = sectionLink(k)
	}
	b.WriteString("```\n\n")
	fmt.Fprintf(&b, "Each provider's keys, what its check does and its reasons: %s.\n", strings.Join(links, ", "))
	return map[string]string{"kinds": b.String()}
}

// configExampleHead is the start of docs/configuration.md's example
// file, before the kinds' sections.
const configExampleHead = "# yaml-language-server: $schema=https://raw.githubusercontent.com/egress-proxies/provider_health_exporter/main/docs/provider_health.schema.json\n" +
	"defaults:                  # optional\n" +
	"  timeout: 10s             # ceiling for one check; the scrape header can only lower it\n" +
	"  min_interval: 0s         # reuse a verdict younger than this; 0 = check on every scrape\n"

// configParts: docs/configuration.md's example file with every kind's
// keys, and each kind's Reasons table in its own section.
func configParts(kinds []provider.Kind) map[string]string {
	var b strings.Builder
	b.WriteString("```yaml\n" + configExampleHead)
	for _, k := range kinds {
		fmt.Fprintf(&b, "\n%s:\n%s", k.Name(), ensureNewline(k.Doc().Reference))
	}
	b.WriteString("```\n")
	parts := map[string]string{"example": b.String()}
	for _, k := range kinds {
		var t strings.Builder
		t.WriteString("| reason | up | meaning | what to do |\n|---|---|---|---|\n")
		for _, d := range k.Reasons() {
			doc, _ := k.ReasonDoc(d.Reason)
			fmt.Fprintf(&t, "| `%s` | %s | %s | %s |\n", d.Reason, up(d.Up), cell(doc.Means), cell(doc.Action))
		}
		parts["reasons "+k.Name()] = t.String()
	}
	return parts
}

// metricsParts: docs/metrics.md's provider and target labels, the shared
// reasons, and per kind the shared reasons it gives and a table of its
// own. A kind added to the table adds lines and changes none of another
// kind, so that two kinds added at once do not conflict in the text
// (beyond the labels' one line).
func metricsParts(kinds []provider.Kind) map[string]string {
	names, targets := make([]string, len(kinds)), make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = "`" + k.Name() + "`"
		targets[i] = k.Doc().Target + " for " + k.Doc().Title
	}
	labels := fmt.Sprintf("Labels: `provider` (%s), `name` (the configured name),\n`target` (%s).\n",
		strings.Join(names, ", "), strings.Join(targets, ", "))

	var b strings.Builder
	b.WriteString("The shared reasons, which mean the same whichever kind gives them:\n\n")
	b.WriteString("| reason | up | meaning | what to do |\n|---|---|---|---|\n")
	for _, s := range provider.SharedReasonDocs() {
		if i := slices.IndexFunc(kinds, func(k provider.Kind) bool { return k.Reasons().Contains(s.Reason) }); i >= 0 {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.Reason, up(kinds[i].Reasons().Up(s.Reason)), cell(s.Doc.Means), cell(s.Doc.Action))
		}
	}
	for _, k := range kinds {
		var shared []string
		var rows strings.Builder
		for _, d := range k.Reasons() {
			if provider.IsShared(d.Reason) {
				shared = append(shared, "`"+string(d.Reason)+"`")
				continue
			}
			doc, _ := k.ReasonDoc(d.Reason)
			fmt.Fprintf(&rows, "| `%s` | %s | %s | %s |\n", d.Reason, up(d.Up), cell(doc.Means), cell(doc.Action))
		}
		fmt.Fprintf(&b, "\n%s (`provider=\"%s\"`; its section, %s, says what each of its reasons means for it) gives the shared reasons %s",
			k.Doc().Title, k.Name(), sectionLink(k), strings.Join(shared, ", "))
		if rows.Len() == 0 {
			b.WriteString(".\n")
			continue
		}
		b.WriteString(", and these of its own:\n\n| reason | up | meaning | what to do |\n|---|---|---|---|\n")
		b.WriteString(rows.String())
	}
	return map[string]string{"labels": labels, "reasons": b.String()}
}

// runbookItem is one item of a runbook's list: reasons whose runbook
// text is the same, and the kinds that give them.
type runbookItem struct {
	reasons []provider.Reason
	kinds   []string
	text    string
	// own is set for a text in a kind's words: the item names its kinds.
	own bool
}

// runbookParts: the reasons of the ProviderNotReady and
// ProviderActionRequired runbooks, each under the alert it raises: the
// shared reasons first in the vocabulary's order, then the kinds' own in
// the table's order, Unknown last.
func runbookParts(kinds []provider.Kind, actionRequired map[provider.Reason]bool) map[string]string {
	items := map[bool][]*runbookItem{}
	byText := map[bool]map[string]*runbookItem{false: {}, true: {}}
	add := func(k provider.Kind, r provider.Reason) {
		if r == provider.ReasonReady {
			return
		}
		text, own := k.RunbookText(r)
		ar := actionRequired[r]
		it := byText[ar][text]
		if it == nil {
			it = &runbookItem{text: text, own: own}
			byText[ar][text] = it
			items[ar] = append(items[ar], it)
		}
		if !slices.Contains(it.reasons, r) {
			it.reasons = append(it.reasons, r)
		}
		if !slices.Contains(it.kinds, k.Doc().Title) {
			it.kinds = append(it.kinds, k.Doc().Title)
		}
	}
	for _, s := range provider.SharedReasonDocs() {
		if s.Reason == provider.ReasonUnknown {
			continue
		}
		for _, k := range kinds {
			if k.Reasons().Contains(s.Reason) {
				add(k, s.Reason)
			}
		}
	}
	for _, k := range kinds {
		for _, r := range k.Reasons().Reasons() {
			if !provider.IsShared(r) {
				add(k, r)
			}
		}
	}
	for _, k := range kinds {
		if k.Reasons().Contains(provider.ReasonUnknown) {
			add(k, provider.ReasonUnknown)
		}
	}
	render := func(its []*runbookItem) string {
		var b strings.Builder
		for _, it := range its {
			rs := make([]string, len(it.reasons))
			for i, r := range it.reasons {
				rs[i] = "`" + string(r) + "`"
			}
			// The kinds of an item in a kind's words (its own reasons, a
			// shared reason's text composed with its KindDoc.Words); a
			// shared text without them means the same for every kind,
			// and its item does not change when a kind is added.
			who := ""
			if it.own {
				who = " (" + strings.Join(it.kinds, ", ") + ")"
			}
			fmt.Fprintf(&b, "- %s%s: %s\n", strings.Join(rs, ", "), who, it.text)
		}
		return b.String()
	}
	return map[string]string{
		"ProviderNotReady reasons":       render(items[false]),
		"ProviderActionRequired reasons": render(items[true]),
	}
}

func up(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// cell is text fit for a table cell: one line, its pipes escaped.
func cell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(strings.ReplaceAll(s, `\|`, "|"), "|", `\|`)
}

func ensureNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

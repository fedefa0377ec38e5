package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The files that list kinds or reasons by hand, relative to the
// repository's root: kindListProblems checks each against the table of
// kinds, and the generated ones (schemaFiles) are compared with what
// `make generate` would write.
const (
	metricsDoc  = "docs/metrics.md"
	configDoc   = "docs/configuration.md"
	readmeDoc   = "README.md"
	runbookDoc  = "mixin/runbook.md"
	mixinConfig = "mixin/config.libsonnet"
)

// listProblem is a list of kinds or reasons that does not match the
// table of kinds: the file to update, relative to the repository's root,
// and what is wrong with it.
type listProblem struct{ file, msg string }

func (p listProblem) String() string { return p.file + ": " + p.msg }

// repoFile reads a file of the repository by its path from the root.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// kindListProblems checks every list of kinds or reasons in the docs, the
// mixin's runbook and the chart against the table kinds: docs/metrics.md's
// provider and target labels and its Reasons table, docs/configuration.md's
// example file, collect[] values and a section per kind with its reasons,
// the README's example and links, the runbook's entry of every reason,
// and the generated schemas. Each problem names the file to update, so
// that a kind added to the table fails here until every list has it
// (TestDocsListEveryKind; with the toy kind, TestDocsToyKindNamesTheFiles).
func kindListProblems(t *testing.T, kinds []provider.Kind) []listProblem {
	t.Helper()
	var out []listProblem
	add := func(file, format string, args ...any) {
		out = append(out, listProblem{file, fmt.Sprintf(format, args...)})
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Name()
	}
	metricsLabels(repoFile(t, metricsDoc), names, add)
	reasonsTableProblems(t, kinds, add)
	configDocProblems(repoFile(t, configDoc), kinds, add)
	readmeProblems(repoFile(t, readmeDoc), names, add)
	files, err := schemaFiles(kinds)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f.want) {
			add(strings.TrimPrefix(filepath.ToSlash(f.path), "../../"), "stale for the table of kinds %v: run make generate", names)
		}
	}
	return out
}

type addFunc func(file, format string, args ...any)

var labelsRE = regexp.MustCompile("(?s)\nLabels: `provider` \\(([^)]*)\\)(.*?)\n\n")

// metricsLabels checks docs/metrics.md's Labels paragraph: the provider
// label's values are the table's kinds, in its order, and the target
// label is said for each kind ("… for KVM").
func metricsLabels(doc string, names []string, add addFunc) {
	m := labelsRE.FindStringSubmatch(doc)
	if m == nil {
		add(metricsDoc, "section Metrics has no paragraph \"Labels: `provider` (`kind`, ...)\"")
		return
	}
	if got := backquoted(m[1]); !slices.Equal(got, names) {
		add(metricsDoc, "section Metrics: the provider label's values are %v, the table of kinds has %v", got, names)
	}
	for _, n := range names {
		if !strings.Contains(strings.ToLower(m[2]), "for "+n) {
			add(metricsDoc, "section Metrics: the Labels paragraph does not say the target label of kind %s (\"… for %s\")", n, n)
		}
	}
}

var backquotedRE = regexp.MustCompile("`([^`]*)`")

// backquoted lists the backquoted words of s, in order.
func backquoted(s string) []string {
	var out []string
	for _, m := range backquotedRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// reasonsTableProblems: every reason of every kind of the table has its
// row in docs/metrics.md's "Reasons" table, marked for the kind, with its
// up value and what to do; and every reason but Ready is in the runbook
// of the alert it raises: ProviderActionRequired for those in the mixin's
// actionRequiredReasons, ProviderNotReady for the others. A row or a list
// entry that names no reason of the kind is a problem too.
func reasonsTableProblems(t *testing.T, kinds []provider.Kind, add addFunc) {
	t.Helper()
	table := reasonsTable(t)
	runbook := runbookAlerts(t)
	actionRequired := actionRequiredReasons(t)
	all := map[provider.Reason]bool{}
	for _, k := range kinds {
		col := slices.Index(table.header, k.Name())
		if col < 0 {
			add(metricsDoc, "section Reasons: the table has no column for kind %s; add one and mark each of its reasons with x", k.Name())
		}
		for _, d := range k.Reasons() {
			all[d.Reason] = true
			reasonRow(table, k, col, d, add)
			if d.Reason == provider.ReasonReady {
				continue
			}
			alert, why := "ProviderNotReady", "its Diagnosis must say what it points at"
			if actionRequired[d.Reason] {
				alert, why = "ProviderActionRequired", "it is in actionRequiredReasons (mixin/config.libsonnet), so that runbook must say how to fix it"
			}
			if !strings.Contains(runbook[alert], "`"+string(d.Reason)+"`") {
				add(runbookDoc, "section %s does not name `%s` (kind %s): %s", alert, d.Reason, k.Name(), why)
			}
		}
		for r, row := range table.rows {
			if col >= 0 && row[col] == "x" && !k.Reasons().Contains(r) {
				add(metricsDoc, "section Reasons: the row of %s marks kind %s, which has no such reason", r, k.Name())
			}
		}
	}
	for r := range table.rows {
		if !all[r] {
			add(metricsDoc, "section Reasons: %s is the reason of no kind", r)
		}
	}
	for r := range actionRequired {
		if !all[r] {
			add(mixinConfig, "actionRequiredReasons lists %s, the reason of no kind", r)
		}
	}
}

// reasonRow checks the row of reason d of kind k in the Reasons table,
// whose column of k is col (-1: none).
func reasonRow(table mdTable, k provider.Kind, col int, d provider.ReasonDef, add addFunc) {
	row, ok := table.rows[d.Reason]
	if !ok {
		add(metricsDoc, "section Reasons: no row for reason %s of kind %s; add one saying when it happens and what to do", d.Reason, k.Name())
		return
	}
	if col >= 0 && row[col] != "x" {
		add(metricsDoc, "section Reasons: the row of %s does not mark kind %s (an x in its column)", d.Reason, k.Name())
	}
	if want := map[bool]string{true: "1", false: "0"}[d.Up]; row[table.col("up")] != want {
		add(metricsDoc, "section Reasons: %s has up %q, but kind %s gives it up=%s", d.Reason, row[table.col("up")], k.Name(), want)
	}
	if row[table.col("what to do")] == "" {
		add(metricsDoc, "section Reasons: the row of %s does not say what to do", d.Reason)
	}
}

var (
	collectRE     = regexp.MustCompile("`collect\\[\\]=([a-z0-9_\\\\|]+)`")
	yamlBlockRE   = regexp.MustCompile("(?s)```yaml\n(.*?)```")
	topLevelKeyRE = regexp.MustCompile(`(?m)^([a-z][a-z0-9_]*):`)
)

// configDocProblems checks docs/configuration.md: the example file of
// its Configuration chapter has a section per kind, the HTTP endpoints'
// collect[] values are the kinds, and each kind has a section of its own
// (its name as the heading, in any case) with a Reasons table of exactly
// the kind's reasons.
func configDocProblems(doc string, kinds []provider.Kind, add addFunc) {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Name()
	}
	chapter := mdSection(doc, "## ", "Configuration")
	if m := yamlBlockRE.FindStringSubmatch(chapter); m == nil {
		add(configDoc, "section Configuration has no example file")
	} else if got := exampleSections(m[1]); !slices.Equal(got, names) {
		add(configDoc, "section Configuration: the example file has the sections %v, the table of kinds %v", got, names)
	}
	if m := collectRE.FindStringSubmatch(mdSection(doc, "## ", "HTTP endpoints")); m == nil {
		add(configDoc, "section HTTP endpoints does not list the values of collect[] (`collect[]=kind\\|kind`)")
	} else if got := strings.Split(m[1], `\|`); !slices.Equal(got, names) {
		add(configDoc, "section HTTP endpoints: collect[] takes %v, the table of kinds has %v", got, names)
	}
	for _, k := range kinds {
		section := ""
		for _, h := range headings(chapter, "### ") {
			if strings.EqualFold(h, k.Name()) {
				section = mdSection(chapter, "### ", h)
			}
		}
		if section == "" {
			add(configDoc, "section Configuration has no section of kind %s (### %s): its keys, what a check does and its reasons", k.Name(), k.Name())
			continue
		}
		var reasons []string
		for _, h := range headings(section, "#### ") {
			if strings.HasPrefix(h, "Reasons") {
				reasons = tableFirstColumn(mdSection(section, "#### ", h))
			}
		}
		want := make([]string, len(k.Reasons()))
		for i, r := range k.Reasons().Reasons() {
			want[i] = string(r)
		}
		if missing, extra := setDiff(want, reasons), setDiff(reasons, want); len(missing)+len(extra) > 0 {
			add(configDoc, "section %s: its Reasons table lacks %v and has %v, which kind %s does not give", k.Name(), missing, extra, k.Name())
		}
	}
}

// setDiff lists the items of a that b lacks.
func setDiff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// exampleSections are the top-level keys of an example file other than
// defaults, in order.
func exampleSections(yaml string) []string {
	var out []string
	for _, m := range topLevelKeyRE.FindAllStringSubmatch(yaml, -1) {
		if m[1] != "defaults" {
			out = append(out, m[1])
		}
	}
	return out
}

// readmeProblems checks the README's Configuration section: its smallest
// file has a section per kind, and it links each kind's section of
// docs/configuration.md.
func readmeProblems(doc string, names []string, add addFunc) {
	section := mdSection(doc, "## ", "Configuration")
	if m := yamlBlockRE.FindStringSubmatch(section); m == nil {
		add(readmeDoc, "section Configuration has no example file")
	} else if got := exampleSections(m[1]); !slices.Equal(got, names) {
		add(readmeDoc, "section Configuration: the smallest file has the sections %v, the table of kinds %v", got, names)
	}
	for _, n := range names {
		if !strings.Contains(section, "(docs/configuration.md#"+n+")") {
			add(readmeDoc, "section Configuration does not link kind %s's section (docs/configuration.md#%s)", n, n)
		}
	}
}

// mdSection is the text under the heading prefix+title (prefix "## ",
// "### "), up to the next heading of its level or above, headings in code
// blocks aside; "" if none.
func mdSection(doc, prefix, title string) string {
	var out []string
	in, inCode := false, false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		heading := !inCode && strings.HasPrefix(line, "#")
		level := len(line) - len(strings.TrimLeft(line, "#"))
		switch {
		case heading && line == prefix+title:
			in = true
			continue
		case in && heading && level <= len(prefix)-1 && strings.HasPrefix(line[level:], " "):
			return strings.Join(out, "\n")
		}
		if in {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// headings are the titles of the headings of text that start with prefix.
func headings(text, prefix string) []string {
	var out []string
	inCode := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if !inCode && strings.HasPrefix(line, prefix) {
			out = append(out, strings.TrimPrefix(line, prefix))
		}
	}
	return out
}

// tableFirstColumn lists the first cell of each row of the first table of
// text, without backquotes.
func tableFirstColumn(text string) []string {
	var out []string
	header := true
	for _, line := range strings.Split(text, "\n") {
		switch {
		case !strings.HasPrefix(line, "|"):
			if len(out) > 0 {
				return out
			}
		case strings.HasPrefix(line, "|---"):
		case header:
			header = false
		default:
			cell, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
			out = append(out, strings.Trim(strings.TrimSpace(cell), "`"))
		}
	}
	return out
}

type mdTable struct {
	header []string
	rows   map[provider.Reason][]string
}

func (m mdTable) col(name string) int { return slices.Index(m.header, name) }

// reasonsTable reads the table of docs/metrics.md's "Reasons" section:
// one row per reason, its cells trimmed, the reason without backquotes.
func reasonsTable(t *testing.T) mdTable {
	t.Helper()
	section := mdSection(repoFile(t, metricsDoc), "## ", "Reasons")
	if section == "" {
		t.Fatal("docs/metrics.md has no Reasons section")
	}
	cells := func(line string) []string {
		out := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range out {
			out[i] = strings.TrimSpace(out[i])
		}
		return out
	}
	m := mdTable{rows: map[provider.Reason][]string{}}
	for _, line := range strings.Split(section, "\n") {
		switch {
		case !strings.HasPrefix(line, "|"), strings.HasPrefix(line, "|---"):
		case m.header == nil:
			m.header = cells(line)
		default:
			row := cells(line)
			if len(row) != len(m.header) {
				t.Fatalf("docs/metrics.md, section Reasons: row %q has %d cells, the header %d", line, len(row), len(m.header))
			}
			m.rows[provider.Reason(strings.Trim(row[0], "`"))] = row
		}
	}
	for _, c := range []string{"reason", "up", "what to do"} {
		if m.col(c) < 0 {
			t.Fatalf("docs/metrics.md, section Reasons: the table has no %q column: %v", c, m.header)
		}
	}
	return m
}

// runbookAlerts maps each "## Alert" section of mixin/runbook.md to its text.
func runbookAlerts(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, part := range strings.Split(repoFile(t, runbookDoc), "\n## ")[1:] {
		name, text, _ := strings.Cut(part, "\n")
		out[strings.TrimSpace(name)] = text
	}
	return out
}

var actionRequiredRE = regexp.MustCompile(`(?s)actionRequiredReasons: \[(.*?)\]`)

// actionRequiredReasons reads the list of that name in mixin/config.libsonnet.
func actionRequiredReasons(t *testing.T) map[provider.Reason]bool {
	t.Helper()
	m := actionRequiredRE.FindStringSubmatch(repoFile(t, mixinConfig))
	if m == nil {
		t.Fatal("mixin/config.libsonnet has no actionRequiredReasons list")
	}
	out := map[provider.Reason]bool{}
	for _, item := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(m[1], -1) {
		out[provider.Reason(item[1])] = true
	}
	if len(out) == 0 {
		t.Fatalf("mixin/config.libsonnet: actionRequiredReasons is empty: %s", m[1])
	}
	return out
}

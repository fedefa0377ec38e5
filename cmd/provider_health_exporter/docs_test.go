//go:build !toykind

// The toy kind (-tags toykind) is a test's, not a kind users configure:
// its reasons are documented nowhere on purpose.

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/collector"
)

// TestEveryReasonDocumentedAndAlerted: every reason of every kind of the
// table has its row in docs/metrics.md's "Reasons" table, marked for the
// kind, with its up value and what to do; and every reason but Ready is
// in the runbook of the alert it raises: ProviderActionRequired for those
// in the mixin's actionRequiredReasons, ProviderNotReady for the others.
// A row or a list entry that names no reason of the kind is an error too.
func TestEveryReasonDocumentedAndAlerted(t *testing.T) {
	t.Parallel()
	kinds, err := kindTable()
	if err != nil {
		t.Fatal(err)
	}
	table := reasonsTable(t)
	runbook := runbookAlerts(t)
	actionRequired := actionRequiredReasons(t)

	all := map[collector.Reason]bool{}
	for _, k := range kinds {
		col := slices.Index(table.header, k.Name())
		if col < 0 {
			t.Errorf("docs/metrics.md, section Reasons: the table has no column for kind %s; add one and mark each of its reasons with x", k.Name())
			continue
		}
		for _, d := range k.Reasons() {
			all[d.Reason] = true
			row, ok := table.rows[d.Reason]
			if !ok {
				t.Errorf("docs/metrics.md, section Reasons: no row for reason %s of kind %s; add one saying when it happens and what to do", d.Reason, k.Name())
				continue
			}
			if row[col] != "x" {
				t.Errorf("docs/metrics.md, section Reasons: the row of %s does not mark kind %s (an x in its column)", d.Reason, k.Name())
			}
			if want := map[bool]string{true: "1", false: "0"}[d.Up]; row[table.col("up")] != want {
				t.Errorf("docs/metrics.md, section Reasons: %s has up %q, but kind %s gives it up=%s", d.Reason, row[table.col("up")], k.Name(), want)
			}
			if row[table.col("what to do")] == "" {
				t.Errorf("docs/metrics.md, section Reasons: the row of %s does not say what to do", d.Reason)
			}
			if d.Reason == collector.ReasonReady {
				continue
			}
			alert, why := "ProviderNotReady", "its Diagnosis must say what it points at"
			if actionRequired[d.Reason] {
				alert, why = "ProviderActionRequired", "it is in actionRequiredReasons (mixin/config.libsonnet), so that runbook must say how to fix it"
			}
			if !strings.Contains(runbook[alert], "`"+string(d.Reason)+"`") {
				t.Errorf("mixin/runbook.md, section %s, does not name `%s` (kind %s): %s", alert, d.Reason, k.Name(), why)
			}
		}
		for r, row := range table.rows {
			if row[col] == "x" && !k.Reasons().Contains(r) {
				t.Errorf("docs/metrics.md, section Reasons: the row of %s marks kind %s, which has no such reason", r, k.Name())
			}
		}
	}
	for r := range table.rows {
		if !all[r] {
			t.Errorf("docs/metrics.md, section Reasons: %s is the reason of no kind", r)
		}
	}
	for r := range actionRequired {
		if !all[r] {
			t.Errorf("mixin/config.libsonnet: actionRequiredReasons lists %s, the reason of no kind", r)
		}
	}
}

type mdTable struct {
	header []string
	rows   map[collector.Reason][]string
}

func (m mdTable) col(name string) int { return slices.Index(m.header, name) }

// reasonsTable reads the table of docs/metrics.md's "Reasons" section:
// one row per reason, its cells trimmed, the reason without backquotes.
func reasonsTable(t *testing.T) mdTable {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Reasons\n")
	if !ok {
		t.Fatal("docs/metrics.md has no Reasons section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	cells := func(line string) []string {
		out := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range out {
			out[i] = strings.TrimSpace(out[i])
		}
		return out
	}
	m := mdTable{rows: map[collector.Reason][]string{}}
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
			m.rows[collector.Reason(strings.Trim(row[0], "`"))] = row
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
	b, err := os.ReadFile(filepath.Join("..", "..", "mixin", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, part := range strings.Split(string(b), "\n## ")[1:] {
		name, text, _ := strings.Cut(part, "\n")
		out[strings.TrimSpace(name)] = text
	}
	return out
}

var actionRequiredRE = regexp.MustCompile(`(?s)actionRequiredReasons: \[(.*?)\]`)

// actionRequiredReasons reads the list of that name in mixin/config.libsonnet.
func actionRequiredReasons(t *testing.T) map[collector.Reason]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "mixin", "config.libsonnet"))
	if err != nil {
		t.Fatal(err)
	}
	m := actionRequiredRE.FindSubmatch(b)
	if m == nil {
		t.Fatal("mixin/config.libsonnet has no actionRequiredReasons list")
	}
	out := map[collector.Reason]bool{}
	for _, item := range regexp.MustCompile(`'([^']*)'`).FindAllSubmatch(m[1], -1) {
		out[collector.Reason(item[1])] = true
	}
	if len(out) == 0 {
		t.Fatalf("mixin/config.libsonnet: actionRequiredReasons is empty: %s", m[1])
	}
	return out
}

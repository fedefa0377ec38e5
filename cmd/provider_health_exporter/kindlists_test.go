package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/internal/docgen"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The files that list kinds or reasons, relative to the repository's
// root: `make generate` writes their lists between markers
// (internal/docgen), and kindListProblems checks each against what it
// would write.
const (
	metricsDoc  = docgen.MetricsDoc
	configDoc   = docgen.ConfigDoc
	readmeDoc   = docgen.ReadmeDoc
	runbookDoc  = docgen.RunbookDoc
	mixinConfig = docgen.MixinConfig
)

// listProblem is a list of kinds or reasons that does not match the
// table of kinds: the file to update, relative to the repository's root,
// and what is wrong with it.
type listProblem struct{ file, msg string }

func (p listProblem) String() string { return p.file + ": " + p.msg }

// repoFile reads a file of the repository by its path from the root.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// kindListProblems checks every list of kinds or reasons in the docs, the
// mixin's runbook and the chart against the table kinds: each file that
// `make generate` writes (the schemas, and the parts between markers of
// docs/metrics.md, docs/configuration.md, the README and the runbook) is
// what it would write now, so that a kind added to the table, or a hand
// edit between markers, fails here until make generate ran; what keeps
// make generate from writing a file (no section of a kind in
// docs/configuration.md, a marker missing, a reason without a
// description) names the file too; and the mixin's actionRequiredReasons
// name no reason no kind has. Each problem names the file to update
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
	files, probs, err := docgen.Files(repoRoot, kinds)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		add(p.File, "%s", p.Msg)
	}
	configDocProblems(repoFile(t, configDoc), kinds, add)
	actionRequiredProblems(t, kinds, add)
	stale, err := docgen.Stale(repoRoot, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range stale {
		add(f, "stale for the table of kinds %v: run make generate", names)
	}
	return out
}

type addFunc func(file, format string, args ...any)

// actionRequiredProblems: the mixin's actionRequiredReasons, which say
// which alert's runbook lists a reason, name only reasons of the kinds.
func actionRequiredProblems(t *testing.T, kinds []provider.Kind, add addFunc) {
	t.Helper()
	actionRequired, err := docgen.ActionRequiredReasons(repoFile(t, mixinConfig))
	if err != nil {
		t.Fatalf("%s: %v", mixinConfig, err)
	}
	for _, r := range slices.Sorted(maps.Keys(actionRequired)) {
		if !slices.ContainsFunc(kinds, func(k provider.Kind) bool { return k.Reasons().Contains(r) }) {
			add(mixinConfig, "actionRequiredReasons lists %s, the reason of no kind", r)
		}
	}
}

// configDocProblems checks the hand-written part of
// docs/configuration.md: each kind has a section of its own in its
// Configuration chapter (its name as the heading, in any case: its keys,
// what a check does), with the markers of its Reasons table, which make
// generate writes, in it.
func configDocProblems(doc string, kinds []provider.Kind, add addFunc) {
	chapter := mdSection(doc, "## ", "Configuration")
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
		if marker := "<!-- BEGIN GENERATED: reasons " + k.Name() + " -->"; !strings.Contains(section, marker) {
			add(configDoc, "section %s: no %s, under which make generate writes the kind's reasons", k.Name(), marker)
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

//go:build toykind

package main

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/internal/toykind"
)

// newKindFiles are the files a new kind changes, besides its own package
// and its row: its own section of docs/configuration.md, and what make
// generate writes from the table of kinds. What the toy kind fails on.
var newKindFiles = []string{
	configDoc,
	metricsDoc,
	readmeDoc,
	chartSchemaPath,
	schemaPath,
	runbookDoc,
}

// TestDocsToyKindNamesTheFiles: with the toy kind in the table, the lists
// of kinds and reasons do not have it (it is a test's kind, documented
// nowhere: no section in docs/configuration.md, make generate not run
// for it), so kindListProblems must find each file a new kind changes,
// every problem about the toy kind alone; and docs/development.md's
// "Adding a provider" must name each of those files, so that the recipe
// says every step the toy kind needed.
func TestDocsToyKindNamesTheFiles(t *testing.T) {
	t.Parallel()
	kinds, err := kindTable()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	for _, p := range kindListProblems(t, kinds) {
		t.Log(p)
		files[p.file] = true
		if !strings.Contains(p.msg, toykind.Name) {
			t.Errorf("a problem that is not the toy kind's (the built-in kinds' lists must be current): %s", p)
		}
	}
	if got, want := slices.Sorted(maps.Keys(files)), slices.Sorted(slices.Values(newKindFiles)); !slices.Equal(got, want) {
		t.Errorf("the toy kind fails the lists of %v, want %v: a list no longer catches a new kind, or a new list is not in newKindFiles", got, want)
	}
	recipe := mdSection(repoFile(t, "docs/development.md"), "## ", "Adding a provider")
	if recipe == "" {
		t.Fatal("docs/development.md has no section Adding a provider")
	}
	for _, f := range slices.Sorted(maps.Keys(files)) {
		if !strings.Contains(recipe, f) {
			t.Errorf("docs/development.md, section Adding a provider, does not name %s, which the toy kind needs updated", f)
		}
	}
}

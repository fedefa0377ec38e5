//go:build !toykind

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestConfigSchemaCurrent fails when the committed schema of the
// configuration file, or its copy under the chart's config value, is not
// what the table of kinds generates: `make generate` (go run
// ./internal/generate) rewrites both. With the toy kind built in,
// TestDocsToyKindNamesTheFiles checks instead that both are found stale
// (kindListProblems), as the committed files hold the built-in kinds
// only, and TestConfigSchemaSections that the generation has the toy
// kind's section.
func TestConfigSchemaCurrent(t *testing.T) {
	kinds, err := kindTable()
	if err != nil {
		t.Fatal(err)
	}
	files, err := schemaFiles(kinds)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(f.Path)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f.Data) {
			t.Errorf("%s is stale: run make generate", f.Path)
		}
	}
}

//go:build !toykind

package main

import (
	"bytes"
	"os"
	"testing"
)

// TestConfigSchemaCurrent fails when the committed schema of the
// configuration file, or its copy under the chart's config value, is not
// what the table of kinds generates: `make generate` (go test -run
// TestConfigSchemaCurrent -update) rewrites both. With the toy kind built
// in, TestDocsToyKindNamesTheFiles checks instead that both are found
// stale (kindListProblems), as the committed files hold the built-in
// kinds only, and TestConfigSchemaSections that the generation has the
// toy kind's section.
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
		if *update {
			if err := os.WriteFile(f.path, f.want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f.want) {
			t.Errorf("%s is stale: run make generate", f.path)
		}
	}
}

//go:build !toykind

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The generated files of the configuration's schema (docs/configuration.md:
// "Schema"), relative to this package.
var (
	schemaFile      = filepath.Join("..", "..", "docs", "provider_health.schema.json")
	chartSchemaFile = filepath.Join("..", "..", "deploy", "helm", "provider-health-exporter", "values.schema.json")
)

// TestConfigSchemaCurrent fails when the committed schema of the
// configuration file, or its copy under the chart's config value, is not
// what the table of kinds generates: `make generate` (go test -run
// TestConfigSchemaCurrent -update) rewrites both. With the toy kind built
// in, TestConfigSchemaWithToyKind checks the generation instead, as the
// committed files hold the built-in kinds only.
func TestConfigSchemaCurrent(t *testing.T) {
	want, err := configSchema()
	if err != nil {
		t.Fatal(err)
	}
	chart, err := os.ReadFile(chartSchemaFile)
	if err != nil {
		t.Fatal(err)
	}
	wantChart, err := chartValuesSchema(chart, want)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path string
		want []byte
	}{{schemaFile, want}, {chartSchemaFile, wantChart}} {
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

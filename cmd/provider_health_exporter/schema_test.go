//go:build !toykind

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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

// chartConfigDescription is the description of the chart's config value,
// the one row of the chart's README table for it.
const chartConfigDescription = "The exporter's configuration file (docs/configuration.md), rendered into a ConfigMap; a change rolls the Pod. Checked against the configuration's schema (docs/provider_health.schema.json)."

// chartValuesSchema is the chart's values.schema.json with the value of
// properties.config replaced by schema (minus its $schema, with the
// chart's description), indented as the file is: Helm reads no file
// outside the chart, and not every Helm resolves a $ref to one, so the
// chart holds a copy.
func chartValuesSchema(values, schema []byte) ([]byte, error) {
	var doc struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(values, &doc); err != nil {
		return nil, fmt.Errorf("values.schema.json: %w", err)
	}
	old, ok := doc.Properties["config"]
	if !ok || bytes.Count(values, old) != 1 {
		return nil, errors.New("values.schema.json: no properties.config to replace, or more than one copy of it")
	}
	var cfg map[string]any
	if err := json.Unmarshal(schema, &cfg); err != nil {
		return nil, fmt.Errorf("the configuration's schema: %w", err)
	}
	delete(cfg, "$schema")
	cfg["description"] = chartConfigDescription
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("    ", "  ")
	if err := enc.Encode(cfg); err != nil {
		return nil, err
	}
	return bytes.Replace(values, old, bytes.TrimRight(buf.Bytes(), "\n"), 1), nil
}

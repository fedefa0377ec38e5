package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// configSchema is the schema of the configuration file of this binary's
// table of kinds.
func configSchema() ([]byte, error) {
	kinds, err := kindTable()
	if err != nil {
		return nil, err
	}
	return config.Schema(provider.Sections(kinds))
}

// TestConfigSchemaSections checks the generated schema against the table
// of kinds it is made from, whichever kinds are built in: a section per
// kind (the toy kind's too under -tags toykind), each entry with the keys
// of its type and nothing else allowed, in the schema and in the chart's
// values schema that make generate writes.
func TestConfigSchemaSections(t *testing.T) {
	raw, err := configSchema()
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		AdditionalProperties bool `json:"additionalProperties"`
		Properties           map[string]struct {
			Items struct {
				AdditionalProperties *bool                      `json:"additionalProperties"`
				Required             []string                   `json:"required"`
				Properties           map[string]json.RawMessage `json:"properties"`
			} `json:"items"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	kinds, err := kindTable()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"defaults"}
	for _, k := range kinds {
		want = append(want, k.Name())
	}
	if got := slices.Sorted(maps.Keys(s.Properties)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("sections %v, want the table's %v", got, want)
	}
	if s.AdditionalProperties {
		t.Error("the schema allows unknown top-level keys")
	}
	for _, k := range kinds {
		item := s.Properties[k.Name()].Items
		if item.AdditionalProperties == nil || *item.AdditionalProperties {
			t.Errorf("%s entries allow unknown keys", k.Name())
		}
		for _, key := range []string{"name", "timeout", "min_interval"} {
			if _, ok := item.Properties[key]; !ok {
				t.Errorf("%s entries have no key %s", k.Name(), key)
			}
		}
		if !slices.Contains(item.Required, "name") {
			t.Errorf("%s entries: name is not required", k.Name())
		}
	}
	// The chart's copy has the same sections, so that make generate lets
	// the chart take a new kind.
	files, err := schemaFiles(kinds)
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Properties struct {
			Config struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"config"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(files[1].want, &chart); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(chart.Properties.Config.Properties)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("%s: the config value has sections %v, want the table's %v", chartSchemaPath, got, want)
	}
}

// The generated files of the configuration's schema (docs/configuration.md:
// "Schema"), relative to this package.
const (
	schemaPath      = "docs/provider_health.schema.json"
	chartSchemaPath = "deploy/helm/provider-health-exporter/values.schema.json"
)

var (
	schemaFile      = filepath.Join("..", "..", filepath.FromSlash(schemaPath))
	chartSchemaFile = filepath.Join("..", "..", filepath.FromSlash(chartSchemaPath))
)

// generatedFile is a committed file that `make generate` writes, and what
// it must hold.
type generatedFile struct {
	path string
	want []byte
}

// schemaFiles are the schema files of the configuration of kinds, as
// `make generate` writes them: the schema, and the chart's values schema
// with the schema under its config value.
func schemaFiles(kinds []provider.Kind) ([]generatedFile, error) {
	want, err := config.Schema(provider.Sections(kinds))
	if err != nil {
		return nil, err
	}
	chart, err := os.ReadFile(chartSchemaFile)
	if err != nil {
		return nil, err
	}
	wantChart, err := chartValuesSchema(chart, want)
	if err != nil {
		return nil, err
	}
	return []generatedFile{{schemaFile, want}, {chartSchemaFile, wantChart}}, nil
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

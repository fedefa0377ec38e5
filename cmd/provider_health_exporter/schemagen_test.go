package main

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/docgen"
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
// values schema that make generate writes (docgen.SchemaFiles).
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
	if err := json.Unmarshal(files[1].Data, &chart); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(chart.Properties.Config.Properties)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("%s: the config value has sections %v, want the table's %v", chartSchemaPath, got, want)
	}
}

// The generated files of the configuration's schema (docs/configuration.md:
// "Schema"), relative to the repository's root.
const (
	schemaPath      = docgen.SchemaPath
	chartSchemaPath = docgen.ChartSchemaPath
)

// repoRoot is the repository's root, relative to this package.
const repoRoot = "../.."

// schemaFiles are the schema files of the configuration of kinds, as
// `make generate` writes them (docgen.SchemaFiles).
func schemaFiles(kinds []provider.Kind) ([]docgen.File, error) {
	return docgen.SchemaFiles(repoRoot, kinds)
}

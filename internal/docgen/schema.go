package docgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// SchemaFiles are the schema files of the configuration of kinds
// (docs/configuration.md: "Schema"): the schema, and the chart's values
// schema under root with the schema under its config value.
func SchemaFiles(root string, kinds []provider.Kind) ([]File, error) {
	want, err := config.Schema(provider.Sections(kinds))
	if err != nil {
		return nil, err
	}
	chart, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(ChartSchemaPath)))
	if err != nil {
		return nil, err
	}
	wantChart, err := ChartValuesSchema(chart, want)
	if err != nil {
		return nil, err
	}
	return []File{{SchemaPath, want}, {ChartSchemaPath, wantChart}}, nil
}

// chartConfigDescription is the description of the chart's config value,
// the one row of the chart's README table for it.
const chartConfigDescription = "The exporter's configuration file (docs/configuration.md), rendered into a ConfigMap; a change rolls the Pod. Checked against the configuration's schema (docs/provider_health.schema.json)."

// ChartValuesSchema is the chart's values.schema.json with the value of
// properties.config replaced by schema (minus its $schema, with the
// chart's description), indented as the file is: Helm reads no file
// outside the chart, and not every Helm resolves a $ref to one, so the
// chart holds a copy.
func ChartValuesSchema(values, schema []byte) ([]byte, error) {
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

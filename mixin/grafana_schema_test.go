package mixin_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	grafana "github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// TestGrafanaSchema decodes every generated dashboard strictly into the Go
// types Grafana generates from its own schema (grafana-foundation-sdk), with
// each panel's options and field config in its panel plugin's types: an
// unknown field, a null where the schema wants a value or a value of the
// wrong type is an error, as it would be for Grafana's schema validation.
func TestGrafanaSchema(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	files, err := filepath.Glob(filepath.Join("dashboards_out", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no dashboards in dashboards_out (run make mixin)")
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range schemaProblems(raw) {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// schemaProblems decodes a dashboard strictly into Grafana's classic schema,
// validates it and checks the type of every panel.
func schemaProblems(raw []byte) []error {
	// The classic schema: dashboards_out holds classic dashboards, the kind
	// Grafana's import takes; v2 is a different document.
	var d grafana.Dashboard //nolint:staticcheck // see above
	if err := strictErr(d.UnmarshalJSONStrict(raw)); err != nil {
		return []error{fmt.Errorf("does not decode strictly into Grafana's dashboard schema: %w", err)}
	}
	var errs []error
	if err := d.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(d.Panels) == 0 {
		errs = append(errs, errors.New("no panels decoded"))
	}
	var generic struct {
		Panels []rawPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &generic); err != nil {
		return append(errs, err)
	}
	for _, p := range generic.Panels {
		errs = append(errs, panelTypeProblems(p)...)
	}
	return errs
}

// rawPanel is what the panel type check reads of a panel; a row holds its
// collapsed panels.
type rawPanel struct {
	Title  string     `json:"title"`
	Type   string     `json:"type"`
	Panels []rawPanel `json:"panels"`
}

// deprecatedPanelTypes are the panel types Grafana itself replaces when it
// loads a dashboard (autoMigrateAngular and autoMigrateRemovedPanelPlugins in
// Grafana's public/app/features/dashboard/state/PanelModel.ts), each with its
// replacement. All but heatmap-new are Angular panels: Grafana 11 turned
// Angular off by default and Grafana 12 removed it, so such a panel either
// fails to render or is migrated on load with whatever options the migration
// can guess.
var deprecatedPanelTypes = map[string]string{
	"graph":                    "timeseries",
	"table-old":                "table",
	"singlestat":               "stat",
	"grafana-singlestat-panel": "stat",
	"grafana-piechart-panel":   "piechart",
	"grafana-worldmap-panel":   "geomap",
	"natel-discrete-panel":     "state-timeline",
	"heatmap-new":              "heatmap",
}

// panelTypeProblems rejects a deprecated panel type, and any type without a
// schema in grafana-foundation-sdk: that is every panel that is not one of
// Grafana's core React panels, such as the Angular-only community panels
// (vonage-status-panel, briangann-gauge-panel, ...), whose options the strict
// decode cannot check and which a stock Grafana does not have.
func panelTypeProblems(p rawPanel) []error {
	var errs []error
	switch repl, deprecated := deprecatedPanelTypes[p.Type]; {
	case p.Type == "row":
	case deprecated:
		errs = append(errs, fmt.Errorf("panel %q: type %q is deprecated (an Angular panel Grafana migrates on load); use %q", p.Title, p.Type, repl))
	default:
		if _, ok := cog.ConfigForPanelcfgVariant(p.Type); !ok {
			errs = append(errs, fmt.Errorf("panel %q: type %q is not a core Grafana panel with a schema in grafana-foundation-sdk", p.Title, p.Type))
		}
	}
	for _, c := range p.Panels {
		errs = append(errs, panelTypeProblems(c)...)
	}
	return errs
}

// strictErr is the error of a strict decode: the SDK's decoders return their
// error list as a typed nil when it is empty, which is no error.
func strictErr(err error) error {
	var list cog.BuildErrors
	if errors.As(err, &list) && len(list) == 0 {
		return nil
	}
	return err
}

// TestGrafanaSchemaRejectsDeprecatedPanels mutates a copy of a generated
// dashboard, one panel at a time turned into a deprecated or Angular-only
// type, at the top level and inside a collapsed row, and requires the schema
// check to reject each for its type: the check passed such panels before.
func TestGrafanaSchemaRejectsDeprecatedPanels(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	files, err := filepath.Glob(filepath.Join("dashboards_out", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in dashboards_out (run make mixin): %v", err)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if errs := schemaProblems(raw); len(errs) != 0 {
		t.Fatalf("%s is rejected unmutated: %v", files[0], errs)
	}
	types := []string{"vonage-status-panel", "briangann-gauge-panel"}
	for typ := range deprecatedPanelTypes {
		types = append(types, typ)
	}
	slices.Sort(types)
	for _, typ := range types {
		for _, inRow := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/inRow=%v", typ, inRow), func(t *testing.T) {
				mutant := mutatePanelType(t, raw, typ, inRow)
				var found bool
				for _, err := range schemaProblems(mutant) {
					found = found || strings.Contains(err.Error(), fmt.Sprintf("type %q is", typ))
				}
				if !found {
					t.Errorf("a %q panel is not rejected for its type: %v", typ, schemaProblems(mutant))
				}
			})
		}
	}
}

// mutatePanelType returns the dashboard with its first panel's type set to
// typ, or with that panel moved into a collapsed row.
func mutatePanelType(t *testing.T, raw []byte, typ string, inRow bool) []byte {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	panels, _ := d["panels"].([]any)
	if len(panels) == 0 {
		t.Fatal("the dashboard has no panels to mutate")
	}
	first, ok := panels[0].(map[string]any)
	if !ok {
		t.Fatalf("panel 0 is a %T", panels[0])
	}
	first["type"] = typ
	if inRow {
		panels[0] = map[string]any{
			"type": "row", "title": "Collapsed", "id": 9999, "collapsed": true,
			"gridPos": first["gridPos"], "panels": []any{first},
		}
	}
	out, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

package mixin_test

import (
	"errors"
	"os"
	"path/filepath"
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
		// The classic schema: dashboards_out holds classic dashboards,
		// the kind Grafana's import takes; v2 is a different document.
		var d grafana.Dashboard //nolint:staticcheck // see above
		if err := strictErr(d.UnmarshalJSONStrict(raw)); err != nil {
			t.Errorf("%s does not decode strictly into Grafana's dashboard schema: %v", f, err)
			continue
		}
		if err := d.Validate(); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if len(d.Panels) == 0 {
			t.Errorf("%s: no panels decoded", f)
		}
	}
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

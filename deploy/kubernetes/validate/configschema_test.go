package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/egress-proxies/provider_health_exporter/deploy/kubernetes/validate/chart"
)

// configSchemaFile is the JSON Schema of the exporter's configuration file,
// generated from its table of kinds (docs/configuration.md: "Schema").
var configSchemaFile = filepath.Join(repoRoot, "docs", "provider_health.schema.json")

// compileConfigSchema compiles the configuration's schema with the
// validator Helm 4 uses, pinned by this module.
func compileConfigSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(configSchemaFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("provider_health.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("provider_health.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// configJSON is a configuration file's first YAML document as the JSON
// value a schema validates (what an editor's YAML language server does).
func configJSON(data []byte) (any, error) {
	var v any
	if err := yamlv3.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(j))
}

// yamlFence is a fenced YAML block of Markdown.
var yamlFence = regexp.MustCompile("(?ms)^ *```yaml\n(.*?)^ *```")

// exampleConfigs are the configuration files the repository shows: each
// YAML block of the docs and the README whose top-level keys are all keys
// of the configuration (a kustomization or a Role is not one), with the
// file and block it comes from.
func exampleConfigs(t *testing.T, topKeys []string) map[string][]byte {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, path := range append(docs, filepath.Join(repoRoot, "README.md"), filepath.Join(chartDir, "README.md")) {
		md, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range yamlFence.FindAllSubmatch(md, -1) {
			var top map[string]any
			if yamlv3.Unmarshal(m[1], &top) != nil || len(top) == 0 {
				continue
			}
			config := true
			for k := range top {
				config = config && slices.Contains(topKeys, k)
			}
			if config {
				out[fmt.Sprintf("%s block %d", filepath.Base(path), i+1)] = m[1]
			}
		}
	}
	return out
}

// schemaTopKeys are the top-level keys the schema allows.
func schemaTopKeys(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(configSchemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range s.Properties {
		keys = append(keys, k)
	}
	return keys
}

// TestConfigSchemaAcceptsExamples: every configuration the repository ships
// or shows validates against the schema: testdata's valid files, the
// kustomize base's, the chart's default config, and each configuration
// block of the docs and READMEs (docs/configuration.md's four at least).
func TestConfigSchemaAcceptsExamples(t *testing.T) {
	s := compileConfigSchema(t)
	files, err := filepath.Glob(filepath.Join(repoRoot, "testdata", "valid-*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(repoRoot, "deploy", "kubernetes", "provider_health.yml"))
	configs := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		configs[f] = data
	}
	values := chartValues(t)
	cfg, err := json.Marshal(values["config"])
	if err != nil {
		t.Fatal(err)
	}
	configs["the chart's config value"] = cfg
	examples := exampleConfigs(t, schemaTopKeys(t))
	inConfigurationMD := 0
	for name, data := range examples {
		configs[name] = data
		if strings.HasPrefix(name, "configuration.md ") {
			inConfigurationMD++
		}
	}
	if inConfigurationMD < 4 {
		t.Errorf("found %d configuration examples in docs/configuration.md, want its general one and one per kind at least: %v", inConfigurationMD, slices.Sorted(maps.Keys(examples)))
	}
	for name, data := range configs {
		v, err := configJSON(data)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if err := s.Validate(v); err != nil {
			t.Errorf("%s does not validate against %s: %v", name, configSchemaFile, err)
		}
	}
}

// notInSchema are the invalid test configurations whose mistake a JSON
// Schema cannot express, and why; every other testdata/invalid-*.yml must
// be rejected by the schema. Each one here must pass the schema, so the
// list stays exact: a rule that starts catching one moves it out.
var notInSchema = map[string]string{
	// Not a mapping of one YAML document: the YAML parser says so (an
	// editor underlines it), before there is anything to validate.
	"invalid-yaml-syntax.yml":   "not YAML",
	"invalid-duplicate-key.yml": "a duplicate key is refused by the YAML parser, and a JSON value cannot hold one",
	"invalid-two-documents.yml": "a schema validates one document",
	// Uniqueness across items by one of their keys: JSON Schema's
	// uniqueItems compares whole items.
	"invalid-duplicate-host.yml": "host names unique within an entry",
	"invalid-duplicate-name.yml": "entry names unique across sections",
	// The file system: what a path names is not in the file.
	"invalid-file-is-directory.yml":      "credentials_file is a directory",
	"invalid-host-key-file-missing.yml":  "a host's private_key_file does not exist",
	"invalid-missing-file.yml":           "kubeconfig does not exist",
	"invalid-pod-template-missing.yml":   "pod_template does not exist",
	"invalid-pod-template-not-a-pod.yml": "the template file holds a Deployment",
	// The Pod manifest in the file pod_template names.
	"invalid-pod-template-unknown-field.yml":   "the template file has an unknown field",
	"invalid-pod-template-wrong-type.yml":      "the template file has a value of the wrong type",
	"invalid-pod-template-other-namespace.yml": "the template file's namespace differs from the entry's",
}

// TestConfigSchemaRejectsInvalid: every invalid test configuration is
// rejected by the schema, except those of notInSchema, which it cannot
// express (and which therefore pass it).
func TestConfigSchemaRejectsInvalid(t *testing.T) {
	s := compileConfigSchema(t)
	files, err := filepath.Glob(filepath.Join(repoRoot, "testdata", "invalid-*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 40 {
		t.Fatalf("%d invalid test configurations; expected testdata's 50 or so", len(files))
	}
	seen := map[string]bool{}
	for _, f := range files {
		name := filepath.Base(f)
		seen[name] = true
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		v, perr := configJSON(data)
		var verr error
		if perr == nil {
			verr = s.Validate(v)
		}
		why, inexpressible := notInSchema[name]
		switch {
		case inexpressible && perr == nil && verr != nil:
			t.Errorf("%s (%s) is rejected by the schema now: take it out of notInSchema\n%v", name, why, verr)
		case !inexpressible && perr != nil:
			t.Errorf("%s: not YAML the schema can see (%v): list it in notInSchema", name, perr)
		case !inexpressible && verr == nil:
			t.Errorf("%s passes the schema, which should reject it", name)
		}
	}
	for name := range notInSchema {
		if !seen[name] {
			t.Errorf("notInSchema lists %s, which testdata does not have", name)
		}
	}
}

// TestChartRejectsConfigMistakes: the chart's config value is held to the
// configuration's schema, so `helm lint`, `helm template` and `helm install`
// refuse a misspelled key or a bad value inside it, which the Pod would
// otherwise crash-loop on.
func TestChartRejectsConfigMistakes(t *testing.T) {
	kube := func(entry map[string]any) map[string]any {
		return map[string]any{"config": map[string]any{"kubernetes": []any{entry}}}
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"a misspelled key of an entry", kube(map[string]any{"nmae": "foo"}), "nmae"},
		{"an entry without a name", kube(map[string]any{"label_selector": "a=b"}), "name"},
		{"a duration Prometheus cannot read", map[string]any{"config": map[string]any{"defaults": map[string]any{"timeout": "10 parsecs"}}}, "timeout"},
		{"a kind the exporter does not have", map[string]any{"config": map[string]any{"aws": []any{map[string]any{"name": "x"}}}}, "aws"},
		{"a gcp entry without project", map[string]any{"config": map[string]any{"gcp": []any{map[string]any{"name": "g"}}}}, "project"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lint := chart.Lint(chartDir, tc.values)
			if len(lint) == 0 || !strings.Contains(errorsText(lint), tc.want) {
				t.Errorf("helm lint --strict: %v; want an error naming %q", lint, tc.want)
			}
			if _, err := chart.Template(t.Context(), chartDir, chartRelease, chartNamespace, tc.values); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template: %v; want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestChartConfigTypoMessage: a misspelled key inside the chart's config
// value is reported by helm as that key and nothing else: no line of an
// allOf or anyOf branch that the right key would have met ("missing
// property 'user'" at the entry or at its hosts), which sent the reader
// to the wrong place. The same file without the typo but with a rule
// broken still names the rule's key.
func TestChartConfigTypoMessage(t *testing.T) {
	kvm := func(entry, host map[string]any) map[string]any {
		e := map[string]any{"name": "lab", "private_key_file": "/k", "known_hosts_file": "/kh", "hosts": []any{host}}
		maps.Copy(e, entry)
		return map[string]any{"config": map[string]any{"kvm": []any{e}}}
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string // the one error line, in part
		lacks  []string
	}{
		{"a misspelled key of a kvm entry", kvm(map[string]any{"usr": "proxyops"}, map[string]any{"address": "192.0.2.10:22"}),
			"additional properties 'usr' not allowed", []string{"missing property", "allOf", "anyOf"}},
		{"a misspelled key of a kvm host", kvm(nil, map[string]any{"address": "192.0.2.10:22", "usr": "proxyops"}),
			"additional properties 'usr' not allowed", []string{"missing property", "allOf", "anyOf"}},
		{"a misspelled key of a gcp entry", map[string]any{"config": map[string]any{"gcp": []any{map[string]any{"name": "g", "project": "p", "region": []any{"us-central1"}, "min_quota_headroom": map[string]any{"CPUS": 8}}}}},
			"additional properties 'region' not allowed", []string{"missing property", "allOf", "anyOf"}},
		// Without a typo the rules apply: user is on neither the entry nor its host.
		{"a kvm entry without user", kvm(nil, map[string]any{"address": "192.0.2.10:22"}), "missing property 'user'", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := chart.Template(t.Context(), chartDir, chartRelease, chartNamespace, tc.values)
			if err == nil {
				t.Fatal("helm template accepted the values")
			}
			msg := err.Error()
			t.Logf("helm template: %s", msg)
			if !strings.Contains(msg, tc.want) {
				t.Errorf("helm template: %s\nwant an error with %q", msg, tc.want)
			}
			for _, l := range tc.lacks {
				if strings.Contains(msg, l) {
					t.Errorf("helm template: %s\nhas %q: a line that does not concern the typo", msg, l)
				}
			}
		})
	}
}

package config

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// schemaEntry is a kind's entry as a kind outside this package writes it.
type schemaEntry struct {
	Name   string            `yaml:"name"`
	URLs   []string          `yaml:"urls,omitempty"`
	Limits map[string]uint32 `yaml:"limits,omitempty"`
	Every  Duration          `yaml:"every,omitempty"`
	Hidden string            `yaml:"-"`
	Check  `yaml:",inline"`
}

func (*schemaEntry) EntryName() string          { return "" }
func (*schemaEntry) ResolvePaths(func(*string)) {}
func (*schemaEntry) Validate(string) error      { return nil }
func (*schemaEntry) TargetCount() int           { return 1 }

// badRules names a key its type does not have (a field renamed).
type badRules struct {
	schemaEntry `yaml:",inline"`
}

func (badRules) SchemaKeywords() map[string]Keywords {
	return map[string]Keywords{"label": {"minLength": 1}}
}

// TestSchemaOfAKind: a kind's section is a list of its entries, each an
// object of the entry type's yaml keys (the inline Check's too, yaml:"-"
// left out) and no other, typed by their Go types, with the name required
// and the timeout positive whatever the kind.
func TestSchemaOfAKind(t *testing.T) {
	raw, err := Schema([]Section{{Kind: "toy", New: func() Entry { return &schemaEntry{} }}})
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties map[string]struct {
			Type  json.RawMessage `json:"type"`
			Items struct {
				AdditionalProperties bool                       `json:"additionalProperties"`
				Required             []string                   `json:"required"`
				Properties           map[string]json.RawMessage `json:"properties"`
			} `json:"items"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	toy := s.Properties["toy"]
	if compactJSON(t, toy.Type) != `["array","null"]` || toy.Items.AdditionalProperties || strings.Join(toy.Items.Required, ",") != "name" {
		t.Errorf("toy section: type %s, additionalProperties %v, required %v", toy.Type, toy.Items.AdditionalProperties, toy.Items.Required)
	}
	want := map[string]string{
		"name":         `"type":"string"`,
		"urls":         `"items":{"type":"string"},"type":"array"`,
		"limits":       `"additionalProperties":{"minimum":0,"type":"integer"},"type":"object"`,
		"every":        `"pattern":"` + strings.ReplaceAll(durationPattern, `\`, `\\`) + `"`,
		"timeout":      `"not":{"pattern":"^[0ywdhms]*$"}`,
		"min_interval": `"minimum":0`,
	}
	if len(toy.Items.Properties) != len(want) {
		t.Errorf("keys %v, want those of %v", toy.Items.Properties, want)
	}
	for key, frag := range want {
		if got := compactJSON(t, toy.Items.Properties[key]); !strings.Contains(got, frag) {
			t.Errorf("%s: %s, want it to hold %s", key, got, frag)
		}
	}
	if _, ok := s.Properties["defaults"]; !ok {
		t.Error("no defaults")
	}
}

func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestSchemaRefusesStaleRules: keywords for a key the type does not have
// (a field renamed or removed) are an error, not silently dropped; so is a
// section twice or an entry without a name.
func TestSchemaRefusesStaleRules(t *testing.T) {
	for name, sections := range map[string][]Section{
		"a rule for no key": {{Kind: "bad", New: func() Entry { return &badRules{} }}},
		"a section twice": {
			{Kind: "toy", New: func() Entry { return &schemaEntry{} }},
			{Kind: "toy", New: func() Entry { return &schemaEntry{} }},
		},
		"an entry without name": {{Kind: "anon", New: func() Entry { return &schemaEntryNoName{} }}},
	} {
		if _, err := Schema(sections); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

type schemaEntryNoName struct {
	URL   string `yaml:"url"`
	Check `yaml:",inline"`
}

func (*schemaEntryNoName) EntryName() string          { return "" }
func (*schemaEntryNoName) ResolvePaths(func(*string)) {}
func (*schemaEntryNoName) Validate(string) error      { return nil }
func (*schemaEntryNoName) TargetCount() int           { return 1 }

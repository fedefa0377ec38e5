package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
)

// SchemaDraft is the JSON Schema draft of Schema: draft-07, the one Helm 3
// and 4, yaml-language-server and most editors read.
const SchemaDraft = "http://json-schema.org/draft-07/schema#"

// Keywords are JSON Schema keywords of one schema ("type", "pattern",
// "description", ...), as Schema writes them.
type Keywords = map[string]any

// SchemaKeywordser is implemented by a configuration type (an entry, a
// struct an entry holds, Check, Defaults) that says more of its keys than
// their Go types do: a description, a pattern, a bound, which keys are
// required. SchemaKeywords maps a yaml key to keywords merged into that
// key's schema; the key "" holds keywords of the object itself (required,
// dependencies, anyOf). A key the type does not have is an error of
// Schema, so the rules cannot outlive the field.
type SchemaKeywordser interface {
	SchemaKeywords() map[string]Keywords
}

// JSONSchemaer is implemented by a type whose YAML form is not what its Go
// kind says (a Duration is a string): JSONSchema is its whole schema.
type JSONSchemaer interface {
	JSONSchema() Keywords
}

// Schema is the JSON Schema (draft-07) of a configuration file of the given
// sections, indented, with a final newline: the keys of each section's
// entries as their yaml tags name them, typed by their Go types, with the
// keywords of SchemaKeywords, and no other key allowed anywhere. It is
// generated from the exporter's table of kinds by `make generate` into
// docs/provider_health.schema.json (docs/configuration.md: "Schema"), so a
// kind or a key added to the code is in the schema without an edit of it.
func Schema(sections []Section) ([]byte, error) {
	props := map[string]any{}
	defaults, err := structSchema(reflect.TypeFor[Defaults]())
	if err != nil {
		return nil, fmt.Errorf("defaults: %w", err)
	}
	defaults["description"] = "Settings every entry takes unless it sets its own."
	props["defaults"] = defaults
	for _, s := range sections {
		if s.Kind == "defaults" || props[s.Kind] != nil {
			return nil, fmt.Errorf("section %q: defined twice", s.Kind)
		}
		if s.New == nil {
			return nil, fmt.Errorf("section %q: no New", s.Kind)
		}
		item, err := structSchema(reflect.TypeOf(s.New()))
		if err != nil {
			return nil, fmt.Errorf("section %s: %w", s.Kind, err)
		}
		if err := entryKeywords(item); err != nil {
			return nil, fmt.Errorf("section %s: %w", s.Kind, err)
		}
		guardRules(item)
		props[s.Kind] = Keywords{
			// `kubernetes:` with nothing after it is an empty section.
			"type":        []string{"array", "null"},
			"description": fmt.Sprintf("The %s entries (provider=%q), each one checked on its own.", s.Kind, s.Kind),
			"items":       item,
		}
	}
	doc := Keywords{
		"$schema":              SchemaDraft,
		"title":                "provider_health_exporter configuration file",
		"description":          "The file of --config.file (docs/configuration.md). Generated from the exporter's table of kinds by make generate: do not edit.",
		"type":                 "object",
		"additionalProperties": false,
		"properties":           props,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	// Patterns hold < and >, which need no escaping in a file.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("encode the schema: %w", err)
	}
	return buf.Bytes(), nil
}

// entryKeywords adds what every entry has, whatever its kind, as Load
// checks it: a name, required and free of control characters, and the
// settings of Check (a positive timeout). Check says nothing itself: as an
// embedded type its SchemaKeywords would be promoted to the entry's type.
func entryKeywords(item Keywords) error {
	props, _ := item["properties"].(map[string]any)
	name, ok := props["name"].(Keywords)
	if !ok {
		return fmt.Errorf("the entry has no name key")
	}
	if t, ok := props["timeout"].(Keywords); ok {
		positive(t)
		t["description"] = "Timeout of the entry's check; default: defaults.timeout."
	}
	if m, ok := props["min_interval"].(Keywords); ok {
		m["description"] = "Least time between two checks of the entry: a scrape sooner gets the last verdict; default: defaults.min_interval."
	}
	name["minLength"] = 1
	name["pattern"] = NoControlCharacters
	if _, ok := name["description"]; !ok {
		name["description"] = "The entry's name: its name label, unique across the file."
	}
	req, _ := item["required"].([]string)
	if !slices.Contains(req, "name") {
		item["required"] = append([]string{"name"}, req...)
	}
	return nil
}

// guardRules makes the rules of s and of the objects within it (allOf:
// "user here or on every host", "regions with min_quota_headroom") apply
// only to an object whose keys, and those of the objects within it, are
// all known. A validator reports every failed branch: a misspelled key
// (usr for user) was followed by lines of each anyOf branch that the
// right key would have met, "missing property 'user'" at the entry and at
// its hosts, which sent the reader to the wrong place. Guarded, the
// misspelled key is the whole error; once it is fixed the rules apply
// (docs/configuration.md: "Schema").
func guardRules(s Keywords) {
	if props, ok := s["properties"].(map[string]any); ok {
		for _, v := range props {
			if p, ok := v.(Keywords); ok {
				guardRules(p)
			}
		}
	}
	if items, ok := s["items"].(Keywords); ok {
		guardRules(items)
	}
	rules, ok := s["allOf"]
	if !ok {
		return
	}
	if known, ok := knownKeys(s); ok {
		s["allOf"] = []any{Keywords{"if": known, "then": Keywords{"allOf": rules}}}
	}
}

// knownKeys is the schema that holds exactly when an object of s's shape
// has no key s does not allow, nor any object within it (an entry's
// hosts); false when s allows every key.
func knownKeys(s Keywords) (Keywords, bool) {
	out := Keywords{}
	props, _ := s["properties"].(map[string]any)
	if s["additionalProperties"] == false {
		out["propertyNames"] = Keywords{"enum": slices.Sorted(maps.Keys(props))}
	}
	within := map[string]any{}
	for k, v := range props {
		if p, ok := v.(Keywords); ok {
			if g, ok := knownKeys(p); ok {
				within[k] = g
			}
		}
	}
	if len(within) > 0 {
		out["properties"] = within
	}
	if items, ok := s["items"].(Keywords); ok {
		if g, ok := knownKeys(items); ok {
			out["items"] = g
		}
	}
	return out, len(out) > 0
}

// NoControlCharacters is the pattern of a string without control
// characters, in the syntax both Go's regexp and ECMAScript read.
const NoControlCharacters = `^[^\x00-\x1f\x7f]*$`

// typeSchema is the schema of a value of Go type t.
func typeSchema(t reflect.Type) (Keywords, error) {
	if s, ok := reflect.New(t).Interface().(JSONSchemaer); ok {
		return s.JSONSchema(), nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeSchema(t.Elem())
	case reflect.String:
		return Keywords{"type": "string"}, nil
	case reflect.Bool:
		return Keywords{"type": "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return Keywords{"type": "integer"}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return Keywords{"type": "integer", "minimum": 0}, nil
	case reflect.Float32, reflect.Float64:
		return Keywords{"type": "number"}, nil
	case reflect.Slice, reflect.Array:
		items, err := typeSchema(t.Elem())
		if err != nil {
			return nil, err
		}
		return Keywords{"type": "array", "items": items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map with %s keys", t.Key())
		}
		values, err := typeSchema(t.Elem())
		if err != nil {
			return nil, err
		}
		return Keywords{"type": "object", "additionalProperties": values}, nil
	case reflect.Struct:
		return structSchema(t)
	case reflect.Interface:
		return Keywords{}, nil
	default:
		return nil, fmt.Errorf("no schema for Go type %s", t)
	}
}

// structSchema is the schema of a struct: its yaml keys (inline structs'
// keys as its own), no other key, and the keywords of SchemaKeywords.
func structSchema(t reflect.Type) (Keywords, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s is not a struct", t)
	}
	props := map[string]any{}
	obj := Keywords{"type": "object", "additionalProperties": false, "properties": props}
	if err := addFields(obj, props, t); err != nil {
		return nil, err
	}
	return obj, nil
}

// addFields adds the keys of struct t to props (yamlKeys), and the
// keywords of t and of each inline struct to props' keys and to obj.
func addFields(obj Keywords, props map[string]any, t reflect.Type) error {
	keys, inline := yamlKeys(t)
	for _, k := range keys {
		s, err := typeSchema(k.typ)
		if err != nil {
			return fmt.Errorf("%s: %w", k.name, err)
		}
		props[k.name] = s
	}
	for _, it := range append(inline, t) {
		if err := addKeywords(obj, props, it); err != nil {
			return err
		}
	}
	return nil
}

// addKeywords adds the keywords of struct t's SchemaKeywords, if it has
// one, to props' keys and to obj.
func addKeywords(obj Keywords, props map[string]any, t reflect.Type) error {
	k, ok := reflect.New(t).Interface().(SchemaKeywordser)
	if !ok {
		return nil
	}
	rules := k.SchemaKeywords()
	for _, key := range slices.Sorted(maps.Keys(rules)) {
		target := obj
		if key != "" {
			p, ok := props[key].(Keywords)
			if !ok {
				return fmt.Errorf("%s.SchemaKeywords: no key %q", t.Name(), key)
			}
			target = p
		}
		for kw, v := range rules[key] {
			mergeKeyword(target, kw, v)
		}
	}
	return nil
}

// mergeKeyword sets keyword kw of target to v, except that required keys
// and allOf schemas are added to those target has (an entry's name is
// required whatever its type says), and nil deletes the keyword (as
// positive does to a duration's bounds).
func mergeKeyword(target Keywords, kw string, v any) {
	switch add := v.(type) {
	case nil:
		delete(target, kw)
	case []string:
		if have, ok := target[kw].([]string); ok && kw == "required" {
			target[kw] = slices.Concat(have, add)
			return
		}
		target[kw] = v
	case []any:
		if have, ok := target[kw].([]any); ok && kw == "allOf" {
			target[kw] = slices.Concat(have, add)
			return
		}
		target[kw] = v
	default:
		target[kw] = v
	}
}

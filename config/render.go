package config

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// RenderYAML writes the configuration as MarshalYAML does, byte for byte —
// defaults, then every non-empty section in order, URLs redacted — in pieces of bounded
// size: yaml.v3 keeps every event of a document until the document ends
// and MarshalYAML builds a node tree of the whole file first, so that one
// marshalling of a 5,000-host entry holds some ninety megabytes for a
// text of under one (docs/security.md: "Strings, labels and pages").
// Each entry is marshalled on its own, and a long list in it (a KVM
// entry's hosts) renderChunk items at a time.
func (c *Config) RenderYAML() ([]byte, error) {
	var buf bytes.Buffer
	if c.Defaults != (Defaults{}) {
		b, err := marshalRedacted(map[string]any{"defaults": c.Defaults})
		if err != nil {
			return nil, fmt.Errorf("defaults: %w", err)
		}
		buf.Write(b)
	}
	for _, s := range c.sections {
		for i, e := range s.entries {
			b, err := renderEntry(s.Kind, e)
			if err != nil {
				return nil, fmt.Errorf("%s[%d]: %w", s.Kind, i, err)
			}
			if i > 0 {
				// Every piece starts with the section's key.
				b = b[len(s.Kind)+len(":\n"):]
			}
			buf.Write(b)
		}
	}
	return buf.Bytes(), nil
}

// marshalRedacted marshals v as MarshalYAML marshals a section: every
// string that is a URL redacted (redactNode).
func marshalRedacted(v any) ([]byte, error) {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	redactNode(&n)
	return yaml.Marshal(&n) //nolint:wrapcheck // the caller names the piece
}

// renderChunk is how many items of a list are marshalled at once.
const renderChunk = 64

// renderEntry marshals one entry as the one item of its section. A list
// field longer than renderChunk is marshalled with its first item only,
// and that item's lines are then replaced by the whole list, marshalled
// renderChunk items at a time and indented as the first item was.
func renderEntry(kind string, e Entry) ([]byte, error) {
	v := reflect.ValueOf(e)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return marshalRedacted(map[string]any{kind: []Entry{e}})
	}
	var longs []longList
	short := reflect.New(v.Elem().Type())
	short.Elem().Set(v.Elem())
	t := v.Elem().Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Elem().Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || fv.Kind() != reflect.Slice || fv.Len() <= renderChunk || key == "" || key == "-" {
			continue
		}
		longs = append(longs, longList{key, fv})
		short.Elem().Field(i).Set(fv.Slice(0, 1))
	}
	b, err := marshalRedacted(map[string]any{kind: []any{short.Interface()}})
	if err != nil || len(longs) == 0 {
		return b, err //nolint:wrapcheck // the caller names the entry
	}
	lines := strings.SplitAfter(string(b), "\n")
	// The entry's keys are indented as its first one, after "- ".
	indent := strings.Repeat(" ", len(lines[1])-len(strings.TrimLeft(lines[1], " -")))
	var out strings.Builder
	out.Grow(len(b) * 2)
	for i := 0; i < len(lines); i++ {
		out.WriteString(lines[i])
		l := longOf(longs, lines[i], indent)
		if l == nil || i+1 >= len(lines) {
			continue
		}
		// The first item's lines: those indented deeper than the key.
		itemIndent := lines[i+1][:len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " "))]
		j := i + 1
		for j < len(lines) && lines[j] != "" && (strings.HasPrefix(lines[j], indent+" ") || strings.TrimSpace(lines[j]) == "") {
			j++
		}
		for k := 0; k < l.list.Len(); k += renderChunk {
			chunk, err := marshalRedacted(l.list.Slice(k, min(k+renderChunk, l.list.Len())).Interface())
			if err != nil {
				return nil, fmt.Errorf("%s: %w", l.key, err)
			}
			for line := range strings.Lines(string(chunk)) {
				if line != "\n" {
					out.WriteString(itemIndent)
				}
				out.WriteString(line)
			}
		}
		i = j - 1
	}
	return []byte(out.String()), nil
}

// longList is a list field too long to marshal at once, and its key.
type longList struct {
	key  string
	list reflect.Value
}

// longOf is the long list whose key line is line, nil if none.
func longOf(longs []longList, line, indent string) *longList {
	for i := range longs {
		if line == indent+longs[i].key+":\n" {
			return &longs[i]
		}
	}
	return nil
}

package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decode fills c from the document's root mapping: defaults and one list
// per section. Every entry is decoded on its own, so that each error is
// attributed to the entry (and list item within it) whose lines hold it;
// all errors of the file are reported at once.
func (c *Config) decode(top *yaml.Node, sections []Section) error {
	// The sections keep their order, whatever the file's.
	for _, s := range sections {
		c.sections = append(c.sections, sectionEntries{Section: s})
	}
	var errs []string
	seen := map[string]int{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if prev, ok := seen[k.Value]; ok {
			errs = append(errs, fmt.Sprintf("line %d: mapping key %s already defined at line %d", k.Line, QuoteKey(k.Value), prev))
			continue
		}
		seen[k.Value] = k.Line
		if k.Value == "defaults" {
			errs = append(errs, decodeEntry(v, &c.Defaults, "defaults")...)
			continue
		}
		s, ok := sectionOf(sections, k.Value)
		if !ok {
			errs = append(errs, fmt.Sprintf("line %d: unknown field %s", k.Line, QuoteKey(k.Value)))
			continue
		}
		entries, serrs := decodeSection(s, v)
		errs = append(errs, serrs...)
		c.setEntries(s, entries)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

func sectionOf(sections []Section, kind string) (Section, bool) {
	for _, s := range sections {
		if s.Kind == kind {
			return s, true
		}
	}
	return Section{}, false
}

// setEntries keeps the entries of section s.
func (c *Config) setEntries(s Section, entries []Entry) {
	for i := range c.sections {
		if c.sections[i].Kind == s.Kind {
			c.sections[i].entries = entries
		}
	}
}

func decodeSection(s Section, v *yaml.Node) ([]Entry, []string) {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil, nil
	}
	if v.Kind != yaml.SequenceNode {
		return nil, []string{fmt.Sprintf("line %d: cannot unmarshal %s into the %s list (entries start with \"- \")", v.Line, v.ShortTag(), s.Kind)}
	}
	var errs []string
	entries := make([]Entry, len(v.Content))
	for i, item := range v.Content {
		if item.Kind == yaml.ScalarNode && item.Tag == "!!null" {
			continue // an empty entry: validate says so
		}
		where := entry(s.Kind, i, scalar(item, "name"))
		if item.Kind != yaml.MappingNode {
			errs = append(errs, fmt.Sprintf("line %d: %s: cannot unmarshal %s into a %s entry (a mapping of settings)", item.Line, where, item.ShortTag(), s.Kind))
			continue
		}
		e := s.New()
		errs = append(errs, decodeEntry(item, e, where)...)
		entries[i] = e
	}
	return entries, errs
}

// decodeEntry decodes one mapping node into out strictly: a key out's
// type does not have is an error, as is a value of the wrong type. The
// errors name where they are and the key of their line.
func decodeEntry(n *yaml.Node, out any, where string) []string {
	if n.Kind != yaml.MappingNode {
		return []string{fmt.Sprintf("line %d: %s: cannot unmarshal %s into %s (a mapping of settings)", n.Line, where, n.ShortTag(), where)}
	}
	errs := unknownKeys(n, reflect.TypeOf(out), where)
	if err := n.Decode(out); err != nil {
		var te *yaml.TypeError
		msgs := []string{err.Error()}
		if errors.As(err, &te) {
			msgs = te.Errors
		}
		for _, m := range msgs {
			errs = append(errs, locate(n, where, m))
		}
	}
	return errs
}

var lineRE = regexp.MustCompile(`^line (\d+): `)

// goTypeRE matches the Go types yaml names in its messages, which mean
// nothing to the person editing the file.
var goTypeRE = regexp.MustCompile(` into (\[\])?\*?[A-Za-z_][\w]*\.[\w]+`)

// locate adds to one of yaml's "line N: ..." messages the place in the
// entry n (where) that spans the line, and the key on that line, so that
// it reads "line 8: kvm[0] "lab": hosts[0]: pool: ...".
func locate(n *yaml.Node, where, msg string) string {
	m := lineRE.FindStringSubmatch(msg)
	if m == nil {
		return where + ": " + msg
	}
	line, _ := strconv.Atoi(m[1])
	path, key := pathAt(n, line)
	rest := msg[len(m[0]):]
	if sub := goTypeRE.FindStringSubmatch(rest); sub != nil {
		what := "a mapping of settings"
		if sub[1] != "" {
			what = fmt.Sprintf("the %s list (entries start with \"- \")", key)
		}
		rest = strings.Replace(rest, sub[0], " into "+what, 1)
	}
	if path != "" {
		where += ": " + path
	}
	// The key is in the message already for these.
	if key != "" && !strings.HasPrefix(rest, "mapping key ") {
		where += ": " + key
	}
	return m[0] + where + ": " + rest
}

// pathAt finds the list items within n (hosts[0]) whose lines include
// line, and the key on that line.
func pathAt(n *yaml.Node, line int) (path, key string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Line == line && k.Kind == yaml.ScalarNode {
			return "", k.Value
		}
		if v.Kind != yaml.SequenceNode {
			continue
		}
		// A list's last item ends where the mapping's next key starts: a
		// line from there on is that key's, not the item's.
		if i+2 < len(n.Content) && line >= n.Content[i+2].Line {
			continue
		}
		if j, item := itemAt(v, line); item != nil {
			p, key := pathAt(item, line)
			path = fmt.Sprintf("%s[%d]", k.Value, j)
			if p != "" {
				path += ": " + p
			}
			return path, key
		}
	}
	return "", ""
}

// itemAt finds the sequence item whose lines include line: items start at
// their own line and end before the next one starts.
func itemAt(seq *yaml.Node, line int) (int, *yaml.Node) {
	for i, it := range seq.Content {
		next := int(^uint(0) >> 1)
		if i+1 < len(seq.Content) {
			next = seq.Content[i+1].Line
		}
		if it.Line <= line && line < next && it.Kind == yaml.MappingNode {
			return i, it
		}
	}
	return 0, nil
}

func scalar(m *yaml.Node, key string) string {
	if m.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key && m.Content[i+1].Kind == yaml.ScalarNode {
			return m.Content[i+1].Value
		}
	}
	return ""
}

// unknownKeys reports the keys of the mapping n that the struct type t
// (or what it points to) has no field for, in the structs and lists of
// structs it holds too (a kvm entry's hosts).
func unknownKeys(n *yaml.Node, t reflect.Type, where string) []string {
	k := keyChecker{fields: map[reflect.Type]map[string]reflect.Type{}}
	return k.check(n, t, func() string { return where })
}

// keyChecker keeps the fields of each struct type it has met: a list of
// 100,000 hosts is one type, whose fields were worked out again for every
// host (a fifth of what a reload of a 16 MiB file allocated).
type keyChecker struct {
	fields map[reflect.Type]map[string]reflect.Type
}

// check is unknownKeys with where made only for an error: the name of a
// list item is one string per host.
func (kc keyChecker) check(n *yaml.Node, t reflect.Type, where func() string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || n.Kind != yaml.MappingNode {
		return nil
	}
	fields, ok := kc.fields[t]
	if !ok {
		fields = yamlFields(t)
		kc.fields[t] = fields
	}
	var errs []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		ft, ok := fields[k.Value]
		if !ok {
			errs = append(errs, fmt.Sprintf("line %d: %s: unknown field %s", k.Line, where(), QuoteKey(k.Value)))
			continue
		}
		switch {
		case ft.Kind() == reflect.Slice && v.Kind == yaml.SequenceNode:
			for j, item := range v.Content {
				errs = append(errs, kc.check(item, ft.Elem(), func() string { return fmt.Sprintf("%s: %s[%d]", where(), k.Value, j) })...)
			}
		case v.Kind == yaml.MappingNode:
			errs = append(errs, kc.check(v, ft, func() string { return where() + ": " + k.Value })...)
		}
	}
	return errs
}

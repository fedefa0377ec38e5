package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A large file is decoded list by list. yaml.v3 builds the node tree of a
// whole document before anything is decoded from it, and that tree costs
// some thirteen times the text: 211 MiB for a 16 MiB file of 260,000 KVM
// hosts, more than the Deployment's whole memory limit
// (docs/scaling.md: "Large configurations"). So the long lists of a large
// file (the sections, and the lists of an entry, such as a kvm entry's
// hosts) are cut out of the text where their items start, and decoded a
// few items at a time; the rest of the file, with those lines left blank
// so that every line keeps its number, is decoded as before.
//
// Cutting text is only right where the YAML's structure is what the
// indentation says, so every piece is checked: a list is cut only under
// a plain "key:" line that the decoded rest of the file shows is that
// key with no value, and a cut inside a quoted or flow scalar, or an
// alias of an anchor in another piece, leaves a piece that does not
// parse. Whenever anything does not check out, or a piece does not parse,
// the whole file is decoded as before, at the whole file's cost in memory,
// and its errors are those of the whole file. A setting's error (an
// unknown field, a value of the wrong type) in a piece that parsed is
// reported from the piece, with the line, the place and the words of the
// whole file's; when there are several, a list's come after its entry's.

// chunking is when and how finely a file is decoded list by list.
type chunking struct {
	// from is the size of file from which it is.
	from int
	// batch is the size of text a list's items are decoded by; an item
	// larger than it is decoded on its own, its own lists by batches.
	batch int
}

// largeFiles: files of 1 MiB and over, lists by 64 KiB of items (some
// 1,000 KVM hosts, a node tree of under 1 MiB).
var largeFiles = chunking{from: 1 << 20, batch: 64 << 10}

// errWhole says that a file is to be decoded whole after all.
var errWhole = errors.New("decode the file whole")

// lines is a text and where each of its lines starts.
type lines struct {
	data   []byte
	starts []int32 // one per line, then len(data): the cap of a file is 16 MiB
}

func splitLines(data []byte) *lines {
	l := &lines{data: data, starts: make([]int32, 0, bytes.Count(data, []byte{'\n'})+2)}
	for off := 0; off < len(data); {
		l.starts = append(l.starts, int32(off))
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			break
		}
		off += i + 1
	}
	l.starts = append(l.starts, int32(len(data)))
	return l
}

func (l *lines) count() int { return len(l.starts) - 1 }

// at is where line i starts.
func (l *lines) at(i int) int { return int(l.starts[i]) }

// line is line i (from 0) without its newline.
func (l *lines) line(i int) []byte {
	return bytes.TrimSuffix(l.data[l.at(i):l.at(i+1)], []byte{'\n'})
}

// Kinds of line, as far as cutting is concerned.
const (
	neutral = iota // blank, or only a comment
	item           // "- ..." or "-": a block sequence's item starts
	other
)

// classify says what line b is and at which column its text starts.
func classify(b []byte) (indent, kind int) {
	indent = len(b) - len(bytes.TrimLeft(b, " "))
	rest := b[indent:]
	switch {
	case len(rest) == 0 || rest[0] == '#':
		return indent, neutral
	case rest[0] == '-' && (len(rest) == 1 || rest[1] == ' '):
		return indent, item
	}
	return indent, other
}

// plainKey is the key of a line that is only "key:" at column col (and
// maybe a comment), with a key of letters, digits, '_', '-' and '.'.
func plainKey(b []byte, col int) (string, bool) {
	if len(b) <= col || len(b)-len(bytes.TrimLeft(b, " ")) != col {
		return "", false
	}
	rest := b[col:]
	end := bytes.IndexByte(rest, ':')
	if end < 1 {
		return "", false
	}
	if bytes.ContainsFunc(rest[:end], func(r rune) bool { return !plainKeyRune(r) }) {
		return "", false
	}
	if rest[0] == '-' || rest[0] == '.' {
		return "", false
	}
	after := bytes.TrimLeft(rest[end+1:], " ")
	if len(after) > 0 && (after[0] != '#' || len(after) == len(rest[end+1:])) {
		return "", false
	}
	return string(rest[:end]), true
}

func plainKeyRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
}

// hole is a block sequence under a "key:" line, cut out of its text.
type hole struct {
	key     string
	keyLine int // from 0
	keyCol  int
	first   int // the first item's line
	end     int // after the last line of the last item
	indent  int // the column of the items' "-"
}

// items are the lines where the hole's items start.
func (h hole) items(l *lines) []int {
	var out []int
	for i := h.first; i < h.end; i++ {
		if ind, kind := classify(l.line(i)); kind == item && ind == h.indent {
			out = append(out, i)
		}
	}
	return out
}

// findHoles finds the lists under "key:" lines at column keyCol in lines
// [a, b): a list runs while its lines are blank, comments, more indented
// than its "-", or items at the column of its first.
func findHoles(l *lines, a, b, keyCol int) []hole {
	var out []hole
	for i := a; i < b; i++ {
		key, ok := plainKey(l.line(i), keyCol)
		if !ok {
			continue
		}
		j := nextLine(l, i+1, b)
		if j == b {
			break
		}
		n, kind := classify(l.line(j))
		if kind != item || n < keyCol {
			continue
		}
		last := j
		for k := j + 1; k < b; k++ {
			ind, kind := classify(l.line(k))
			if kind == neutral {
				continue
			}
			if ind > n || kind == item && ind == n {
				last = k
				continue
			}
			break
		}
		// What follows the list must be a sibling of its key or less
		// indented; a line more indented would belong to the key's value
		// once the list is cut out (and is an error in the list).
		if k := nextLine(l, last+1, b); k < b {
			if ind, _ := classify(l.line(k)); ind > keyCol {
				continue
			}
		}
		out = append(out, hole{key: key, keyLine: i, keyCol: keyCol, first: j, end: last + 1, indent: n})
		i = last
	}
	return out
}

// nextLine is the first line from i on, before b, that is neither blank
// nor only a comment; b if there is none.
func nextLine(l *lines, i, b int) int {
	for i < b {
		if _, kind := classify(l.line(i)); kind != neutral {
			return i
		}
		i++
	}
	return b
}

// skeleton is the text of lines [a, b) with the lines of holes blank.
func skeleton(l *lines, a, b int, holes []hole) []byte {
	size := l.at(b) - l.at(a) + 1
	for _, h := range holes {
		size -= l.at(h.end) - l.at(h.first) - (h.end - h.first)
	}
	var out bytes.Buffer
	out.Grow(size)
	for i := a; i < b; {
		if len(holes) > 0 && i == holes[0].first {
			out.Write(bytes.Repeat([]byte{'\n'}, holes[0].end-i))
			i = holes[0].end
			holes = holes[1:]
			continue
		}
		out.Write(l.line(i))
		out.WriteByte('\n')
		i++
	}
	return out.Bytes()
}

// parsePiece parses text, which starts at line offset (from 0) of the
// file, as one document: its root node, with the file's line numbers.
func parsePiece(text []byte, offset int) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 {
		return nil, errWhole
	}
	shiftLines(doc.Content[0], offset)
	return doc.Content[0], nil
}

func shiftLines(n *yaml.Node, offset int) {
	n.Line += offset
	for _, c := range n.Content {
		shiftLines(c, offset)
	}
}

// emptyValue checks that the mapping m has the key of h, at its line and
// column, with no value: the hole's list is that key's value.
// A key the mapping has twice is left to decoding the whole file, which
// says where each is.
func emptyValue(m *yaml.Node, h hole) bool {
	found, twice := false, false
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Line == h.keyLine+1 && k.Column == h.keyCol+1 {
			found = k.Kind == yaml.ScalarNode && k.Value == h.key && k.Style == 0 && k.Anchor == "" && k.Tag == "!!str" &&
				v.Kind == yaml.ScalarNode && v.Tag == "!!null" && v.Value == "" && v.Anchor == "" && v.Style == 0
		} else if k.Value == h.key {
			twice = true
		}
	}
	return found && !twice
}

// decodeLarge decodes data list by list (see above). fileErr are the
// errors of settings in pieces that parsed, which decoding the whole
// file would report too (perhaps in another order); err, errWhole or
// a piece that did not parse, says to decode the file whole instead.
func (c *Config) decodeLarge(data []byte, sections []Section, ch chunking) (fileErr, err error) {
	if len(data) < ch.from || !cuttable(data) {
		return nil, errWhole
	}
	l := splitLines(data)
	holes := findHoles(l, 0, l.count(), 0)
	if len(holes) == 0 {
		return nil, errWhole
	}
	top, err := rootMapping(skeleton(l, 0, l.count(), holes))
	if err != nil {
		return nil, err
	}
	for _, h := range holes {
		if _, ok := sectionOf(sections, h.key); !ok || !emptyValue(top, h) {
			return nil, errWhole
		}
	}
	var errs []string
	if err := c.decode(top, sections); err != nil {
		errs = append(errs, err.Error())
	}
	for _, h := range holes {
		s, _ := sectionOf(sections, h.key)
		entries, err := decodeEntries(l, h, s, ch, &errs)
		if err != nil {
			return nil, err
		}
		c.setEntries(s, entries)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; ")), nil
	}
	return nil, nil
}

// cuttable: no line is indented with a tab, none ends in "\r", and the
// file starts with neither a byte order mark nor a directive, which the
// pieces would not have.
func cuttable(data []byte) bool {
	if len(data) > 0 && (data[0] >= 0x80 || data[0] == '%') {
		return false
	}
	return !bytes.Contains(data, []byte{'\r'}) && !bytes.Contains(data, []byte("\n\t")) && !bytes.Contains(data, []byte(" \t"))
}

// decodeEntries decodes the entries of section s, the items of hole h,
// by batches of items, and an item larger than a batch on its own.
func decodeEntries(l *lines, h hole, s Section, ch chunking, errs *[]string) ([]Entry, error) {
	starts := h.items(l)
	entries := make([]Entry, 0, len(starts))
	err := batches(l, h, starts, ch, func(items []*yaml.Node, first, end int) error {
		if items == nil { // one large item
			e, err := decodeLargeEntry(l, first, end, s, len(entries), ch, errs)
			entries = append(entries, e)
			return err
		}
		for _, it := range items {
			if it.Kind == yaml.ScalarNode && it.Tag == "!!null" {
				entries = append(entries, nil) // an empty entry: validate says so
				continue
			}
			e := s.New()
			where := entry(s.Kind, len(entries), scalar(it, "name"))
			if it.Kind != yaml.MappingNode {
				return errWhole
			}
			*errs = append(*errs, decodeEntry(it, e, where)...)
			entries = append(entries, e)
		}
		return nil
	})
	return entries, err
}

// batches calls f with the item nodes of hole h's items (which start at
// lines starts) a batch of text at a time; an item larger than a batch
// is not parsed but handed to f alone, as nil and its lines [first, end).
func batches(l *lines, h hole, starts []int, ch chunking, f func(items []*yaml.Node, first, end int) error) error {
	for i := 0; i < len(starts); {
		end := func(j int) int {
			if j+1 < len(starts) {
				return starts[j+1]
			}
			return h.end
		}
		if l.at(end(i))-l.at(starts[i]) > ch.batch {
			if err := f(nil, starts[i], end(i)); err != nil {
				return err
			}
			i++
			continue
		}
		j := i + 1
		for j < len(starts) && l.at(end(j))-l.at(starts[i]) <= ch.batch {
			j++
		}
		seq, err := parsePiece(l.data[l.at(starts[i]):l.at(end(j-1))], starts[i])
		if err != nil {
			return err
		}
		if seq.Kind != yaml.SequenceNode || len(seq.Content) != j-i {
			return errWhole
		}
		if err := f(seq.Content, 0, 0); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// decodeLargeEntry decodes the entry of section s in lines [first, end),
// the index-th of its section, with its own lists cut out and decoded
// by batches.
func decodeLargeEntry(l *lines, first, end int, s Section, index int, ch chunking, errs *[]string) (Entry, error) {
	lead, _ := classify(l.line(first))
	col := lead + 1 + len(l.line(first)[lead+1:]) - len(bytes.TrimLeft(l.line(first)[lead+1:], " "))
	holes := findHoles(l, first, end, col)
	seq, err := parsePiece(skeleton(l, first, end, holes), first)
	if err != nil {
		return nil, err
	}
	if seq.Kind != yaml.SequenceNode || len(seq.Content) != 1 || seq.Content[0].Kind != yaml.MappingNode {
		return nil, errWhole
	}
	it := seq.Content[0]
	for _, h := range holes {
		if !emptyValue(it, h) {
			return nil, errWhole
		}
	}
	e := s.New()
	where := entry(s.Kind, index, scalar(it, "name"))
	*errs = append(*errs, decodeEntry(it, e, where)...)
	for _, h := range holes {
		if err := decodeList(l, h, e, where, ch, errs); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// decodeList decodes the items of hole h, by batches, into the list
// field of out (a pointer to a struct) its key names.
func decodeList(l *lines, h hole, out any, where string, ch chunking, errs *[]string) error {
	field, ok := fieldByKey(reflect.ValueOf(out).Elem(), h.key)
	if !ok || field.Kind() != reflect.Slice {
		return errWhole
	}
	starts := h.items(l)
	field.Set(reflect.MakeSlice(field.Type(), 0, len(starts)))
	kc := keyChecker{fields: map[reflect.Type]map[string]reflect.Type{}}
	elem := field.Type().Elem()
	return batches(l, h, starts, ch, func(items []*yaml.Node, first, end int) error {
		if items == nil {
			seq, err := parsePiece(l.data[l.at(first):l.at(end)], first)
			if err != nil {
				return err
			}
			if seq.Kind != yaml.SequenceNode || len(seq.Content) != 1 {
				return errWhole
			}
			items = seq.Content
		}
		base := field.Len()
		whereAt := func(k int) string { return fmt.Sprintf("%s: %s[%d]", where, h.key, base+k) }
		clean := true
		for k, it := range items {
			if len(kc.check(it, elem, func() string { return whereAt(k) })) > 0 {
				clean = false
				break
			}
		}
		if clean {
			// The batch decoded at once, as yaml decodes the whole list:
			// a decoder per item made a sixth of a large file's garbage.
			batch := reflect.New(field.Type())
			err := (&yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: items}).Decode(batch.Interface())
			if err == nil && batch.Elem().Len() == len(items) {
				field.Set(reflect.AppendSlice(field, batch.Elem()))
				return nil
			}
		}
		// Something in the batch is wrong: item by item, for its errors.
		for k, it := range items {
			if it.Kind != yaml.MappingNode {
				return errWhole
			}
			v := reflect.New(elem)
			*errs = append(*errs, decodeEntry(it, v.Interface(), whereAt(k))...)
			field.Set(reflect.Append(field, v.Elem()))
		}
		return nil
	})
}

// fieldByKey is the field of struct v that the key names, as yamlFields
// reads the struct's tags.
func fieldByKey(v reflect.Value, key string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") {
			if f.Type.Kind() == reflect.Struct {
				if fv, ok := fieldByKey(v.Field(i), key); ok {
					return fv, true
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name == key {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// rootMapping parses a whole document into its root mapping (an empty
// one for an empty document) and refuses a second document.
func rootMapping(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	// A second document would be silently ignored; say so instead.
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	top := &yaml.Node{Kind: yaml.MappingNode}
	if len(root.Content) > 0 {
		top = root.Content[0]
	}
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		top = &yaml.Node{Kind: yaml.MappingNode}
	}
	if top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: cannot unmarshal %s into the configuration (a mapping of sections)", top.Line, top.ShortTag())
	}
	return top, nil
}

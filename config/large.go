package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
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
// a file of up to 2 MiB is decoded whole as before, at the whole file's
// cost in memory, and its errors are those of the whole file. A larger
// one is refused instead, as its node tree alone would be a good part of
// the Deployment's memory limit, more than all of it at 16 MiB: with the
// YAML error of the piece that does not parse, at the line decoding the
// whole file gives, or with the line and the reason it could not be cut
// (docs/scaling.md: "Large configurations"). A setting's error (an
// unknown field, a value of the wrong type) in a piece that parsed is
// reported from the piece, with the line, the place and the words of the
// whole file's; when there are several, a list's come after its entry's.
// So is a key the file's root mapping has twice, and a file whose lines
// end in "\r\n" is cut as if they ended in "\n".

// chunking is when and how finely a file is decoded list by list.
type chunking struct {
	// from is the size of file from which it is.
	from int
	// batch is the size of text a list's items are decoded by; an item
	// larger than it is decoded on its own, its own lists by batches.
	batch int
	// whole is the size of file up to which a file that cannot be decoded
	// list by list is decoded whole; a larger one is refused.
	whole int
	// cut, when set, is told of each list decoded by batches: its key and
	// line (from 1). For the tests: what is cut changes memory only.
	cut func(key string, line int)
}

// largeFiles: files of 1 MiB and over, lists by 64 KiB of items (some
// 1,000 KVM hosts, a node tree of under 1 MiB).
var largeFiles = chunking{from: 1 << 20, batch: 64 << 10, whole: 2 << 20}

// errWhole says that a file is to be decoded whole after all: it is
// small, or has no list to cut.
var errWhole = errors.New("decode the file whole")

// notCut says why a file cannot be decoded list by list, and where: the
// error of a large file that is not decoded whole.
type notCut struct {
	line int // from 1
	why  string
}

func (e *notCut) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.why) }

// pieceError is the YAML error of a piece that does not parse, as
// decoding the whole file gives it.
type pieceError struct{ err error }

func (e *pieceError) Error() string { return e.err.Error() }

// yamlLineRE is the line of a yaml.v3 parse error.
var yamlLineRE = regexp.MustCompile(`^yaml: line (-?\d+): `)

// refusal is the error of a file over ch.whole bytes that could not be
// decoded list by list (err from decodeLarge).
func refusal(err error, size int, ch chunking) error {
	var pe *pieceError
	if errors.As(err, &pe) {
		return pe.err
	}
	var nc *notCut
	switch {
	case errors.Is(err, errWhole):
		nc = &notCut{line: 1, why: "no list written in block style (\"- \" items) to decode by parts"}
	case !errors.As(err, &nc):
		return err // an error of the whole file: a second document
	}
	return fmt.Errorf("%w; a configuration of %d KiB, over %d KiB, is decoded list by list, never whole (docs/scaling.md: \"Large configurations\")", nc, size>>10, ch.whole>>10)
}

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
		// once the list is cut out (and is an error in the list), and so
		// would an item at the key's column.
		if k := nextLine(l, last+1, b); k < b {
			if ind, kind := classify(l.line(k)); ind > keyCol || ind == keyCol && kind == item {
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

// skeleton is the text of lines [a, b) with the lines of each hole blank
// but its first, which is "- 0" at the column of its items: a list of one
// item, so that yaml reads what follows as it does in the file, after a
// whole list (emptyValue checks it and puts a null in its place).
func skeleton(l *lines, a, b int, holes []hole) []byte {
	size := l.at(b) - l.at(a) + 1
	for _, h := range holes {
		size -= l.at(h.end) - l.at(h.first) - (h.end - h.first) - h.indent - 3
	}
	var out bytes.Buffer
	out.Grow(size)
	for i := a; i < b; {
		if len(holes) > 0 && i == holes[0].first {
			out.WriteString(strings.Repeat(" ", holes[0].indent) + "- 0")
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

// within is where a piece sits in the file: in the list of a section
// (top), and maybe in the list of one of its entries (entry, list).
type within struct {
	root  int // the line (from 0) of the file's first key
	top   hole
	entry *entryAt
	list  hole
}

// innermost is the list w's pieces are items of.
func (w within) innermost() hole {
	if w.entry != nil {
		return w.list
	}
	return w.top
}

// entryAt is an entry parsed on its own: its first line (from 0), the
// column of its "-" and of its first key.
type entryAt struct{ first, lead, col int }

// header is what yaml must have read before a piece to be in the state
// decoding the whole file is in where the piece starts: the same
// collections, at the same columns, each starting on a line of its own
// (lines: the file's line, from 0, of each), so that an error names the
// line decoding the whole file names; yaml names the line where the
// collection it was reading starts, which may be above the piece.
func (w within) header() (text []byte, lines []int) {
	var b bytes.Buffer
	add := func(line int, parts ...string) {
		for _, p := range parts {
			b.WriteString(p)
		}
		b.WriteByte('\n')
		lines = append(lines, line)
	}
	sp := func(n int) string { return strings.Repeat(" ", n) }
	add(w.root, "_: 0")
	add(w.top.keyLine, "_:")
	add(w.top.first, sp(w.top.indent), "- 0")
	if w.entry != nil {
		add(w.entry.first, sp(w.entry.lead), "-", sp(w.entry.col-w.entry.lead-1), "_: 0")
		add(w.list.keyLine, sp(w.list.keyCol), "_:")
		add(w.list.first, sp(w.list.indent), "- 0")
	}
	return b.Bytes(), lines
}

// parsePiece parses text, a run of items of w's innermost list starting
// at line first (from 0) of the file, and returns the items, with the
// file's line numbers. A YAML error is a *pieceError worded and lined as
// decoding the whole file gives it, or, for an alias of an anchor the
// piece does not have, a *notCut naming it.
func parsePiece(text []byte, first int, w within) ([]*yaml.Node, error) {
	head, lines := w.header()
	var doc yaml.Node
	if err := yaml.Unmarshal(append(head, text...), &doc); err != nil {
		err = pieceErr(err, text, first, lines)
		var pe *pieceError
		if inner := w.innermost(); inner.indent == inner.keyCol && errors.As(err, &pe) {
			// Items at their key's column: yaml's state is not the
			// header's, nor is the line it would name; say the piece's.
			return nil, &notCut{line: first + 1, why: strings.TrimPrefix(pe.Error(), "yaml: ") + " (in the list that starts here)"}
		}
		return nil, err
	}
	n := (*yaml.Node)(nil)
	if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode && len(doc.Content[0].Content) == 4 {
		n = doc.Content[0].Content[3]
	}
	if w.entry != nil && n != nil && n.Kind == yaml.SequenceNode && len(n.Content) == 2 &&
		n.Content[1].Kind == yaml.MappingNode && len(n.Content[1].Content) == 4 {
		n = n.Content[1].Content[3]
	} else if w.entry != nil {
		n = nil
	}
	if n == nil || n.Kind != yaml.SequenceNode || len(n.Content) < 1 {
		return nil, &notCut{line: first + 1, why: "a list whose items are not where their lines say (a quoted or flow value over several lines?)"}
	}
	items := n.Content[1:]
	for _, it := range items {
		shiftLines(it, first-len(lines))
	}
	return items, nil
}

// parserProblems are yaml's parser errors (the rest are the scanner's),
// which name the line of their mark from 0, the scanner's from 1.
var parserProblems = []string{"did not find expected ", "found duplicate %", "found incompatible YAML document", "found undefined tag handle"}

// readerProblems are the errors of yaml's reader (the text is not UTF-8
// or has control characters), whose message has no line.
var readerProblems = []string{"invalid leading UTF-8 octet", "incomplete UTF-8 octet sequence", "invalid trailing UTF-8 octet",
	"invalid length of a UTF-8 sequence", "invalid Unicode character", "incomplete UTF-16 ", "control characters are not allowed", "input error: "}

// pieceErr is yaml's error err for a piece (text, at line first of the
// file, after a header of the lines given), as decoding the whole file
// words and lines it.
func pieceErr(err error, text []byte, first int, lines []int) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "yaml: unknown anchor '"); ok {
		name = strings.TrimSuffix(name, "' referenced")
		line := first + 1
		if i := bytes.Index(text, []byte("*"+name)); i >= 0 {
			line += bytes.Count(text[:i], []byte{'\n'})
		}
		return &notCut{line: line, why: fmt.Sprintf("an alias (*%s) of an anchor in another part of the file", name)}
	}
	rest, ok := strings.CutPrefix(msg, "yaml: ")
	if !ok {
		return &pieceError{err: err}
	}
	if strings.HasSuffix(rest, "found unexpected end of stream") {
		// A quote or bracket open at the piece's end: where the file's
		// own error is depends on the text after it.
		return &notCut{line: first + 1, why: "a quoted or flow value that runs on past its list item (a quote or bracket not closed?)"}
	}
	mark := 0 // the text's line of yaml's mark
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		mark, _ = strconv.Atoi(m[1])
		rest = strings.TrimPrefix(rest, "line "+m[1]+": ")
	}
	if slices.ContainsFunc(readerProblems, func(p string) bool { return strings.HasPrefix(rest, p) }) {
		// yaml names no line for what its reader refuses.
		return &pieceError{err: errors.New("yaml: " + rest)}
	}
	scanner := !slices.ContainsFunc(parserProblems, func(p string) bool { return strings.HasPrefix(rest, p) })
	if scanner && mark > 0 {
		mark--
	}
	if mark >= len(lines)+bytes.Count(text, []byte{'\n'}) {
		// At the piece's end: a bracket open there, and where the
		// file's own error is depends on the text after it.
		return &notCut{line: first + 1, why: "a quoted or flow value that runs on past its list item (a quote or bracket not closed?)"}
	}
	line := first + mark - len(lines)
	if mark < len(lines) {
		line = lines[mark]
	}
	if scanner {
		line++
	}
	if line == 0 {
		return &pieceError{err: errors.New("yaml: " + rest)}
	}
	return &pieceError{err: fmt.Errorf("yaml: line %d: %s", line, rest)}
}

// errorLine is the line (from 1) of a yaml error msg that says "line
// n": n for the scanner's errors, n+1 for the parser's (parserProblems).
func errorLine(msg string, n int) int {
	rest := strings.TrimPrefix(msg, yamlLineRE.FindString(msg))
	if slices.ContainsFunc(parserProblems, func(p string) bool { return strings.HasPrefix(rest, p) }) {
		return n + 1
	}
	return n
}

func shiftLines(n *yaml.Node, offset int) {
	n.Line += offset
	for _, c := range n.Content {
		shiftLines(c, offset)
	}
}

// emptyValue checks that the mapping m has the key of h, at its line and
// column, with the value skeleton put in the hole's place: the hole's
// list is that key's value. That value is then a null, as for a key
// without one, for decoding m. again says that the key came before in m:
// decoding m reports it, and the value decoded is the first one.
func emptyValue(m *yaml.Node, h hole) (found, again bool) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Line == h.keyLine+1 && k.Column == h.keyCol+1 {
			found = k.Kind == yaml.ScalarNode && k.Value == h.key && k.Style == 0 && k.Anchor == "" && k.Tag == "!!str" &&
				v.Kind == yaml.SequenceNode && v.Style == 0 && v.Anchor == "" && v.Tag == "!!seq" && len(v.Content) == 1 &&
				v.Line == h.first+1 && v.Column == h.indent+1 && v.Content[0].Kind == yaml.ScalarNode &&
				v.Content[0].Value == "0" && v.Content[0].Style == 0 && v.Content[0].Anchor == "" && v.Content[0].Tag == "!!int" &&
				v.Content[0].Line == h.first+1
			if found {
				m.Content[i+1] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: v.Line, Column: v.Column}
			}
			return found, again
		}
		if k.Value == h.key {
			again = true
		}
	}
	return false, again
}

// decodeLarge decodes data list by list (see above). fileErr are the
// errors of settings in pieces that parsed, which decoding the whole
// file would report too (perhaps in another order); err (errWhole, a
// *notCut, or the *pieceError of the first piece in the file that does
// not parse) says the file was not decoded list by list.
func (c *Config) decodeLarge(data []byte, sections []Section, ch chunking) (fileErr, err error) {
	if len(data) < ch.from {
		return nil, errWhole
	}
	if err := cuttable(data); err != nil {
		return nil, err
	}
	if bytes.IndexByte(data, '\r') >= 0 {
		data = newlines(data)
	}
	l := splitLines(data)
	holes := findHoles(l, 0, l.count(), 0)
	if len(holes) == 0 {
		return nil, errWhole
	}
	root := nextLine(l, 0, l.count())
	top, err := rootMapping(skeleton(l, 0, l.count(), holes))
	if err != nil {
		return nil, skeletonError(err, l, holes, root, sections, ch)
	}
	cut, err := sectionLists(top, holes, sections)
	if err != nil {
		return nil, err
	}
	var errs []string
	if err := c.decode(top, sections); err != nil {
		errs = append(errs, err.Error())
	}
	for _, h := range cut {
		s, _ := sectionOf(sections, h.key)
		entries, err := decodeEntries(l, within{root: root, top: h}, s, ch, &errs)
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

// skeletonError is the error of a file whose skeleton (the file with its
// lists cut out, holes) does not parse (err): yaml's, unless a list above
// its line has an error of its own, which decoding the whole file meets
// first; or the line of a quote or bracket the skeleton leaves open.
func skeletonError(err error, l *lines, holes []hole, root int, sections []Section, ch chunking) error {
	if !strings.HasPrefix(err.Error(), "yaml: ") {
		return err
	}
	if strings.HasSuffix(err.Error(), "found unexpected end of stream") {
		line := 1
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
		return &notCut{line: line, why: "a quoted or flow value that runs on past a list (a quote or bracket not closed?)"}
	}
	pe := &pieceError{err: err}
	// The skeleton keeps every line's number; a list above its
	// error may hold the file's first.
	return firstError(pe, holes, func(h hole) error {
		s, ok := sectionOf(sections, h.key)
		if !ok {
			// Not a section: its pieces parsed, not decoded, and an
			// item larger than a batch too, up to 1 MiB of it (a
			// tree of some 13 MiB).
			w := within{root: root, top: h}
			return batches(l, w, h.items(l), ch, func(items []*yaml.Node, first, end int) error {
				if items != nil || l.at(end)-l.at(first) > 1<<20 {
					return nil
				}
				_, err := parsePiece(l.data[l.at(first):l.at(end)], first, w)
				return err
			})
		}
		_, err := decodeEntries(l, within{root: root, top: h}, s, ch, new([]string))
		return err
	})
}

// sectionLists checks that each hole is the list of a section, the value
// of its key in top, the skeleton's root mapping (emptyValue, which puts
// a null in its place), and returns the holes to decode: a section's
// second key is not, as decoding the whole file decodes only its first.
func sectionLists(top *yaml.Node, holes []hole, sections []Section) ([]hole, error) {
	var cut []hole
	for _, h := range holes {
		if _, ok := sectionOf(sections, h.key); !ok {
			return nil, &notCut{line: h.keyLine + 1, why: fmt.Sprintf("%s is not a section with a list of entries", QuoteKey(h.key))}
		}
		found, again := emptyValue(top, h)
		if !found {
			return nil, &notCut{line: h.keyLine + 1, why: fmt.Sprintf("the list under %s is not that key's value as its lines say", QuoteKey(h.key))}
		}
		// A section's second key: its error comes from decoding top,
		// and its list is not decoded, as when decoding the whole file.
		if !again {
			cut = append(cut, h)
		}
	}
	return cut, nil
}

// firstError is err, a piece's YAML error, unless one of the holes above
// its line has an error of its own (check): yaml stops at the first.
func firstError(err *pieceError, holes []hole, check func(hole) error) error {
	line, at := math.MaxInt, math.MaxInt
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		at = errorLine(err.Error(), line)
	}
	// yaml's line is from 0 for a parser error, from 1 for the scanner's:
	// a list starting on it may be above the error.
	for _, h := range holes {
		if h.first > line {
			break
		}
		var pe *pieceError
		var nc *notCut
		switch e := check(h); {
		case errors.As(e, &pe):
			// Two errors that yaml words with one line number may be
			// on two lines: a list's scanner error on line n comes
			// before the skeleton's parser error "line n", which is on
			// line n+1. On one line, the skeleton's is the file's.
			if m := yamlLineRE.FindStringSubmatch(pe.Error()); m != nil {
				if n, _ := strconv.Atoi(m[1]); errorLine(pe.Error(), n) < at {
					return pe
				}
			}
		case errors.As(e, &nc) && nc.line <= line:
			// A quote or bracket open in the list may be what the
			// error is of.
			return nc
		}
	}
	return err
}

// cuttable: no line is indented with a tab (its indentation would not be
// what its spaces say), the file starts with neither a byte order mark
// nor a directive, which the pieces would not have, and has none of the
// line breaks yaml counts besides "\n" and "\r" (NEL, U+2028, U+2029),
// which would put its lines where the cut does not, nor a U+FEFF (a byte
// order mark) anywhere: yaml.v3 skips a character at a line's start when
// its read buffer happens to start with one, so the same text can parse
// whole and not in pieces, or the other way round. Otherwise a *notCut
// naming the first.
func cuttable(data []byte) error {
	if len(data) > 0 && (data[0] >= 0x80 || data[0] == '%') {
		return &notCut{line: 1, why: "a byte order mark or a directive (%) before the configuration"}
	}
	line := 1
	for off := 0; off < len(data); line++ {
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			end = len(data) - off
		}
		b := data[off : off+end]
		if lead := bytes.TrimLeft(b, " \t"); bytes.IndexByte(b[:len(b)-len(lead)], '\t') >= 0 {
			return &notCut{line: line, why: "a tab in the indentation (YAML indents with spaces)"}
		}
		if bytes.Contains(b, []byte("\u0085")) || bytes.Contains(b, []byte("\u2028")) || bytes.Contains(b, []byte("\u2029")) {
			return &notCut{line: line, why: "a Unicode line break (NEL, U+2028 or U+2029)"}
		}
		if bytes.Contains(b, []byte("\uFEFF")) {
			return &notCut{line: line, why: "a byte order mark (U+FEFF), which yaml reads by where it falls in its buffer"}
		}
		off += end + 1
	}
	return nil
}

// newlines is data with each "\r\n" and each other "\r" written "\n":
// yaml reads all three as one line break, in values too, so the text
// means what it meant, on the same lines.
func newlines(data []byte) []byte {
	out := make([]byte, 0, len(data))
	for i := 0; i < len(data); i++ {
		if data[i] != '\r' {
			out = append(out, data[i])
			continue
		}
		out = append(out, '\n')
		if i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
	}
	return out
}

// decodeEntries decodes the entries of section s, the items of w's
// list, by batches of items, and an item larger than a batch on its own.
func decodeEntries(l *lines, w within, s Section, ch chunking, errs *[]string) ([]Entry, error) {
	h := w.top
	starts := h.items(l)
	entries := make([]Entry, 0, len(starts))
	if ch.cut != nil {
		ch.cut(h.key, h.keyLine+1)
	}
	err := batches(l, w, starts, ch, func(items []*yaml.Node, first, end int) error {
		if items == nil { // one large item
			e, err := decodeLargeEntry(l, w, first, end, s, len(entries), ch, errs)
			entries = append(entries, e)
			return err
		}
		for _, it := range items {
			if it.Kind == yaml.ScalarNode && it.Tag == "!!null" {
				entries = append(entries, nil) // an empty entry: validate says so
				continue
			}
			where := entry(s.Kind, len(entries), scalar(it, "name"))
			if it.Kind != yaml.MappingNode {
				// As decodeSection says it.
				*errs = append(*errs, fmt.Sprintf("line %d: %s: cannot unmarshal %s into a %s entry (a mapping of settings)", it.Line, where, it.ShortTag(), s.Kind))
				entries = append(entries, nil)
				continue
			}
			e := s.New()
			*errs = append(*errs, decodeEntry(it, e, where)...)
			entries = append(entries, e)
		}
		return nil
	})
	return entries, err
}

// batches calls f with the item nodes of the items of w's innermost list
// (which start at lines starts) a batch of text at a time; an item larger
// than a batch is not parsed but handed to f alone, as nil and its lines
// [first, end).
func batches(l *lines, w within, starts []int, ch chunking, f func(items []*yaml.Node, first, end int) error) error {
	h := w.innermost()
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
		items, err := parsePiece(l.data[l.at(starts[i]):l.at(end(j-1))], starts[i], w)
		if err != nil {
			return err
		}
		if len(items) != j-i {
			return &notCut{line: starts[i] + 1, why: "a list whose items are not where their lines say (a quoted or flow value over several lines?)"}
		}
		if err := f(items, 0, 0); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// decodeLargeEntry decodes the entry of section s in lines [first, end),
// an item of w's list, the index-th of its section, with its own lists
// cut out and decoded by batches.
func decodeLargeEntry(l *lines, w within, first, end int, s Section, index int, ch chunking, errs *[]string) (Entry, error) {
	lead, _ := classify(l.line(first))
	after := l.line(first)[lead+1:]
	col := lead + 1 + len(after) - len(bytes.TrimLeft(after, " "))
	if col == lead+1 || len(bytes.TrimLeft(after, " ")) == 0 {
		return nil, &notCut{line: first + 1, why: "a large entry whose first key is not on the line of its \"-\""}
	}
	holes := findHoles(l, first, end, col)
	at := &entryAt{first: first, lead: lead, col: col}
	items, err := parsePiece(skeleton(l, first, end, holes), first, w)
	if err != nil {
		var pe *pieceError
		if errors.As(err, &pe) {
			// A list above the error may hold the entry's first.
			err = firstError(pe, holes, func(h hole) error {
				return decodeList(l, within{root: w.root, top: w.top, entry: at, list: h}, s.New(), "", ch, new([]string))
			})
		}
		return nil, err
	}
	if len(items) != 1 || items[0].Kind != yaml.MappingNode {
		return nil, &notCut{line: first + 1, why: "an entry that is not where its lines say"}
	}
	it := items[0]
	for _, h := range holes {
		// A key twice: decoding it reports it, its lists are checked.
		if found, _ := emptyValue(it, h); !found {
			return nil, &notCut{line: h.keyLine + 1, why: fmt.Sprintf("the list under %s is not that key's value as its lines say", QuoteKey(h.key))}
		}
	}
	e := s.New()
	where := entry(s.Kind, index, scalar(it, "name"))
	*errs = append(*errs, decodeEntry(it, e, where)...)
	for _, h := range holes {
		if err := decodeList(l, within{root: w.root, top: w.top, entry: at, list: h}, e, where, ch, errs); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// decodeList decodes the items of w's innermost list, by batches, into
// the list field of out (a pointer to a struct) its key names.
func decodeList(l *lines, w within, out any, where string, ch chunking, errs *[]string) error {
	h := w.list
	field, ok := fieldByKey(reflect.ValueOf(out).Elem(), h.key)
	if !ok || field.Kind() != reflect.Slice {
		return &notCut{line: h.keyLine + 1, why: fmt.Sprintf("a list under %s, which is not a list setting", QuoteKey(h.key))}
	}
	if ch.cut != nil {
		ch.cut(h.key, h.keyLine+1)
	}
	starts := h.items(l)
	field.Set(reflect.MakeSlice(field.Type(), 0, len(starts)))
	kc := keyChecker{fields: map[reflect.Type]map[string]reflect.Type{}}
	elem := field.Type().Elem()
	return batches(l, w, starts, ch, func(items []*yaml.Node, first, end int) error {
		if items == nil {
			var err error
			if items, err = parsePiece(l.data[l.at(first):l.at(end)], first, w); err != nil {
				return err
			}
			if len(items) != 1 {
				return &notCut{line: first + 1, why: "a list whose items are not where their lines say (a quoted or flow value over several lines?)"}
			}
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
				return &notCut{line: it.Line, why: fmt.Sprintf("%s: an item of %s that is not a mapping", where, QuoteKey(h.key))}
			}
			v := reflect.New(elem)
			*errs = append(*errs, decodeEntry(it, v.Interface(), whereAt(k))...)
			field.Set(reflect.Append(field, v.Elem()))
		}
		return nil
	})
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

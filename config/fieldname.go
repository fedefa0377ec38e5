package config

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	kjson "sigs.k8s.io/json"
)

// fieldNameRE is what a field name of the configuration or of a Pod can be:
// letters, digits, '_' and '-', starting with a letter or '_'. A key of any
// other shape is no misspelt field: it is the sign of a file that is not
// what the configuration says (a pod_template pointing at /etc/shadow
// parses as a mapping whose keys are its lines).
var fieldNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

// quoteKey is key as an error message shows it: quoted when it could be a
// misspelt field name, otherwise only its length. An error message goes to
// the log, to --config.check's output and to the body of a failed
// /-/reload: what is in a file that is not the configuration's must not
// (docs/security.md: "What the exporter bounds").
func quoteKey(key string) string {
	if fieldNameRE.MatchString(key) {
		return strconv.Quote(key)
	}
	return "(a key of " + strconv.Itoa(len(key)) + " bytes that cannot be a field name, not shown: is this the right file?)"
}

// fieldPathRE is a path of field names and list indices, as the strict
// JSON decoder writes it: spec.containers[0].imagePullPolic.
var fieldPathRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}(\[\d+\])*(\.[A-Za-z_][A-Za-z0-9_-]{0,63}(\[\d+\])*)*$`)

// describeStrictError says what a strict-decoding error of a Pod template
// (unknown or duplicate field) names, at its line in the file, without the
// key's text when that is no field name (quoteKey). root is the file's
// YAML document; the JSON decoder that found the error knows only the
// field's path. line is the field's line, 0 when it is not found.
func describeStrictError(e error, root *yaml.Node) (line int, msg string) {
	kind, _, _ := strings.Cut(e.Error(), " \"")
	if kind != "unknown field" && kind != "duplicate field" {
		kind = "invalid field"
	}
	var fe kjson.FieldError
	if !errors.As(e, &fe) {
		return 0, kind + " (not shown)"
	}
	path := fe.FieldPath()
	key := findKey(root, path)
	if key == nil {
		if fieldPathRE.MatchString(path) {
			return 0, kind + " " + strconv.Quote(path)
		}
		return 0, kind + " " + quoteKey(path)
	}
	at := "line " + strconv.Itoa(key.Line) + ": "
	if fieldNameRE.MatchString(key.Value) {
		return key.Line, at + kind + " " + strconv.Quote(path)
	}
	parent := strings.TrimSuffix(strings.TrimSuffix(path, key.Value), ".")
	where := "at the top level"
	if parent != "" {
		where = "under " + strconv.Quote(parent)
	}
	return key.Line, at + kind + " " + where + ": " + quoteKey(key.Value)
}

// findKey is the key node of the mapping entry that path names in the
// document n (a path as the strict JSON decoder writes it), nil if none.
// Keys may hold dots and brackets themselves, so each key of a mapping
// that starts the path is tried.
func findKey(n *yaml.Node, path string) *yaml.Node {
	for n != nil && (n.Kind == yaml.DocumentNode || n.Kind == yaml.AliasNode) {
		switch {
		case n.Kind == yaml.AliasNode:
			n = n.Alias
		case len(n.Content) == 1:
			n = n.Content[0]
		default:
			return nil
		}
	}
	if n == nil {
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			rest, ok := strings.CutPrefix(path, k.Value)
			switch {
			case !ok:
			case rest == "":
				return k
			case rest[0] == '.':
				if found := findKey(n.Content[i+1], rest[1:]); found != nil {
					return found
				}
			case rest[0] == '[':
				if found := findKey(n.Content[i+1], rest); found != nil {
					return found
				}
			}
		}
	case yaml.SequenceNode:
		idx, rest, ok := strings.Cut(strings.TrimPrefix(path, "["), "]")
		i, err := strconv.Atoi(idx)
		if !ok || err != nil || !strings.HasPrefix(path, "[") || i < 0 || i >= len(n.Content) {
			return nil
		}
		if rest == "" {
			return nil
		}
		if rest[0] == '.' {
			rest = rest[1:]
		}
		return findKey(n.Content[i], rest)
	}
	return nil
}

// quotedRE is a double-quoted string in a parser's message.
var quotedRE = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// hideKeys replaces the quoted strings of a YAML parser's message (a
// duplicate key, say) that cannot be field names with their length, as
// quoteKey does.
func hideKeys(msg string) string {
	return quotedRE.ReplaceAllStringFunc(msg, func(q string) string {
		s, err := strconv.Unquote(q)
		if err != nil {
			s = q[1 : len(q)-1]
		}
		return quoteKey(s)
	})
}

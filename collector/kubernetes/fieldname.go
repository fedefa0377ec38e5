package kubernetes

// The field names of a strict-decoding error of a Pod template, told
// without what is not a field name (config.QuoteKey).

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
	kjson "sigs.k8s.io/json"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// fieldPathRE is a path of field names and list indices, as the strict
// JSON decoder writes it: spec.containers[0].imagePullPolic. Compiled
// when first used: its two {0,63} repetitions make a program of 133 KB in
// 3,000 allocations, which a replica with no Pod template would otherwise
// keep from start to end (docs/scaling.md: "What a kind costs a replica
// that does not use it").
var fieldPathRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}(\[\d+\])*(\.[A-Za-z_][A-Za-z0-9_-]{0,63}(\[\d+\])*)*$`)
})

// describeStrictError says what a strict-decoding error of a Pod template
// (unknown or duplicate field) names, at its line in the file, without the
// key's text when that is no field name (config.QuoteKey). root is the file's
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
		if fieldPathRE().MatchString(path) {
			return 0, kind + " " + strconv.Quote(path)
		}
		return 0, kind + " " + config.QuoteKey(path)
	}
	at := "line " + strconv.Itoa(key.Line) + ": "
	if config.FieldName(key.Value) {
		return key.Line, at + kind + " " + strconv.Quote(path)
	}
	parent := strings.TrimSuffix(strings.TrimSuffix(path, key.Value), ".")
	where := "at the top level"
	if parent != "" {
		where = "under " + strconv.Quote(parent)
	}
	return key.Line, at + kind + " " + where + ": " + config.QuoteKey(key.Value)
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
// config.QuoteKey does.
func hideKeys(msg string) string {
	return quotedRE.ReplaceAllStringFunc(msg, func(q string) string {
		s, err := strconv.Unquote(q)
		if err != nil {
			s = q[1 : len(q)-1]
		}
		return config.QuoteKey(s)
	})
}

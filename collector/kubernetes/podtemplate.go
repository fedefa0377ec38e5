package kubernetes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/boundedfile"
)

// PodTemplate is a kubernetes entry's pod_template (docs/configuration.md:
// "Placement: pod_template"): the file holding the Pod manifest the
// operator creates proxies from, and that Pod, read and decoded strictly
// when the configuration is loaded. Unlike a kubeconfig, whose contents are
// the check's business, the template is part of the configuration: a
// template the API server could not even decode would make every check
// report the exporter's own mistake, so it is refused at load, and a
// changed template takes effect at the next reload.
type PodTemplate struct {
	// Path is the file, as the configuration names it (relative paths
	// are relative to the configuration file).
	Path string `yaml:"-"`
	// Pod is the decoded manifest; nil until the entry is validated, or
	// ReadPodTemplate fills it.
	Pod *corev1.Pod `yaml:"-"`
	// sha256 of the file's contents, hex.
	sha256 string
}

// UnmarshalYAML reads the key's value: a file path.
func (p *PodTemplate) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "") {
		return fmt.Errorf("line %d: cannot unmarshal %s into a file path", n.Line, n.ShortTag())
	}
	p.Path = n.Value
	return nil
}

// MarshalYAML writes the path with the digest of the template in force as
// a comment. An entry's settings are its YAML (engine.Entries' fingerprint
// decides from them whether a reload keeps the checker), so the digest is
// what makes a reload pick up an edited template under the same path; on
// /config it shows which version is in force. A comment keeps the output a
// valid configuration.
func (p PodTemplate) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: p.Path}
	if p.sha256 != "" {
		n.LineComment = "sha256:" + p.sha256
	}
	return n, nil
}

// IsZero tells yaml's omitempty that the key is not set.
func (p PodTemplate) IsZero() bool { return p.Path == "" }

// SHA256 is the hex digest of the template file as read, "" before.
func (p PodTemplate) SHA256() string { return p.sha256 }

// ReadPodTemplate reads the template file at path with the bounded reader
// and decodes it strictly (DecodePodTemplate).
func ReadPodTemplate(path string) (PodTemplate, error) {
	data, err := boundedfile.Read(path, boundedfile.PodTemplate)
	if err != nil {
		return PodTemplate{}, err
	}
	pod, err := DecodePodTemplate(data)
	if err != nil {
		return PodTemplate{}, fmt.Errorf("%s: %w", path, err)
	}
	sum := sha256.Sum256(data)
	return PodTemplate{Path: path, Pod: pod, sha256: hex.EncodeToString(sum[:])}, nil
}

// DecodePodTemplate decodes one Pod manifest, YAML or JSON, as strictly as
// the API server's strict field validation: an unknown or duplicate field,
// or a value of the wrong type, is an error naming the field's path
// (spec.containers[0].imagePullPolic). apiVersion and kind, when present,
// must be v1 and Pod; they are filled in when absent.
func DecodePodTemplate(data []byte) (*corev1.Pod, error) {
	doc, err := singleDocument(data)
	if err != nil {
		return nil, err
	}
	js, err := sigsyaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %s", hideKeys(err.Error()))
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || bytes.Equal(js, []byte("null")) {
		return nil, errors.New("empty: want a Pod manifest (apiVersion: v1, kind: Pod)")
	}
	if js[0] != '{' {
		return nil, errors.New("not a Pod: want a mapping (apiVersion: v1, kind: Pod, metadata, spec)")
	}
	// The kind first: a Deployment's fields would otherwise be reported
	// one by one as unknown fields of a Pod.
	var tm struct {
		APIVersion any `json:"apiVersion"`
		Kind       any `json:"kind"`
	}
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, fmt.Errorf("not a Pod: %w", err)
	}
	if (tm.APIVersion != nil && tm.APIVersion != "v1") || (tm.Kind != nil && tm.Kind != "Pod") {
		return nil, fmt.Errorf("not a Pod: apiVersion %s, kind %s (want apiVersion: v1, kind: Pod)", show(tm.APIVersion), show(tm.Kind))
	}
	pod := &corev1.Pod{}
	strictErrs, err := kjson.UnmarshalStrict(js, pod)
	if err != nil {
		// A quantity's own parser does not say where it was.
		if path := badQuantity(js); path != "" {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return nil, readableTypeError(err)
	}
	if len(strictErrs) > 0 {
		// In the order of the file's lines.
		type lineMsg struct {
			line int
			msg  string
		}
		found := make([]lineMsg, len(strictErrs))
		for i, e := range strictErrs {
			found[i].line, found[i].msg = describeStrictError(e, doc)
		}
		slices.SortStableFunc(found, func(a, b lineMsg) int { return a.line - b.line })
		msgs := make([]string, len(found))
		for i, f := range found {
			msgs[i] = f.msg
		}
		return nil, fmt.Errorf("strict decoding: %s", strings.Join(msgs, "; "))
	}
	pod.APIVersion, pod.Kind = "v1", "Pod"
	return pod, nil
}

// typeErrorRE is encoding/json's wrong-type message, which names the
// field by its Go type and JSON path and the types in Go's words.
var typeErrorRE = regexp.MustCompile(`^json: cannot unmarshal (\w+) into Go struct field [^.\s]+\.(\S+) of type (\S+)$`)

// readableTypeError says a wrong type in the words of the file: the
// field's path and what it holds and should hold.
func readableTypeError(err error) error {
	m := typeErrorRE.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	got := map[string]string{"number": "a number", "string": "a string", "bool": "true or false", "array": "a list", "object": "a mapping"}[m[1]]
	if got == "" {
		got = m[1]
	}
	var want string
	switch t := m[3]; {
	case strings.HasPrefix(t, "[]"):
		want = "a list"
	case strings.HasPrefix(t, "map["):
		want = "a mapping"
	case t == "string":
		want = "a string"
	case t == "bool":
		want = "true or false"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), strings.HasPrefix(t, "float"):
		want = "a number"
	default:
		want = "a mapping"
	}
	return fmt.Errorf("%s: %s where %s is expected", m[2], got, want)
}

func show(v any) string {
	if v == nil {
		return "missing"
	}
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// singleDocument refuses a stream of several YAML documents: only the
// first would be decoded, silently.
// It returns the document, where describeStrictError finds the lines of
// the fields the strict decoder refuses.
func singleDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var n, next yaml.Node
	if err := dec.Decode(&n); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty: want a Pod manifest (apiVersion: v1, kind: Pod)")
		}
		return nil, fmt.Errorf("not YAML or JSON: %s", hideKeys(err.Error()))
	}
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document: want one Pod")
	}
	return &n, nil
}

// quantityMaps are the keys whose values map resource names to quantities
// in a Pod (resources' limits and requests, the Pod's overhead).
var quantityMaps = []string{"limits", "requests", "overhead"}

// badQuantity finds the path of the first value of the manifest js in a
// place that holds a quantity which does not parse as one; "" when there
// is none.
func badQuantity(js []byte) string {
	var v any
	if json.Unmarshal(js, &v) != nil {
		return ""
	}
	var walk func(v any, path string, quantities bool) string
	walk = func(v any, path string, quantities bool) string {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range sortedKeys(v) {
				p := strings.TrimPrefix(path+"."+k, ".")
				if quantities || k == "sizeLimit" {
					if !parsesAsQuantity(v[k]) {
						return p
					}
					continue
				}
				if found := walk(v[k], p, slices.Contains(quantityMaps, k)); found != "" {
					return found
				}
			}
		case []any:
			for i, e := range v {
				if found := walk(e, fmt.Sprintf("%s[%d]", path, i), false); found != "" {
					return found
				}
			}
		}
		return ""
	}
	return walk(v, "", false)
}

func parsesAsQuantity(v any) bool {
	var q resource.Quantity
	b, err := json.Marshal(v)
	return err == nil && q.UnmarshalJSON(b) == nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// validatePodTemplate checks pod_template: it needs the namespace the dry
// run is sent to, and the file must hold one Pod that decodes strictly
// and that belongs to that namespace if it names one (the API server
// refuses a body whose namespace is not the request's).
func (k *Entry) validatePodTemplate(where string) error {
	if k.PodTemplate.Path == "" {
		return nil
	}
	if k.Namespace == "" {
		return fmt.Errorf("%s: namespace: missing (required by pod_template)", where)
	}
	if err := config.Readable(where, "pod_template", boundedfile.PodTemplate, k.PodTemplate.Path); err != nil {
		return err
	}
	pt, err := ReadPodTemplate(k.PodTemplate.Path)
	if err != nil {
		return fmt.Errorf("%s: pod_template: %w", where, err)
	}
	if ns := pt.Pod.Namespace; ns != "" && ns != k.Namespace {
		return fmt.Errorf("%s: pod_template: %s: metadata.namespace %q is not the entry's namespace %q", where, pt.Path, ns, k.Namespace)
	}
	k.PodTemplate = pt
	return nil
}

// JSONSchema implements config.JSONSchemaer: the key's value is the template's
// path.
func (PodTemplate) JSONSchema() config.Keywords {
	return config.Keywords{"type": "string", "minLength": 1}
}

// Package docgen renders every file `make generate` writes from the table
// of kinds (internal/kinds): the configuration's JSON Schema and the
// chart's copy of it, and the parts of the README, docs/metrics.md,
// docs/configuration.md and mixin/runbook.md that list kinds and reasons,
// from each kind's KindDoc. Those parts are between markers
//
//	<!-- BEGIN GENERATED: NAME -->
//	<!-- END GENERATED: NAME -->
//
// and everything outside them is left as it is. The program
// internal/generate writes what Files returns; the command's tests
// compare it with the files, so a stale file, or a hand edit between
// markers, fails them with the file's name (docs/development.md: "Adding
// a provider").
package docgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The generated files, relative to the repository's root.
const (
	SchemaPath      = "docs/provider_health.schema.json"
	ChartSchemaPath = "deploy/helm/provider-health-exporter/values.schema.json"
	MetricsDoc      = "docs/metrics.md"
	ConfigDoc       = "docs/configuration.md"
	ReadmeDoc       = "README.md"
	RunbookDoc      = "mixin/runbook.md"
	// MixinConfig is read, not written: its actionRequiredReasons say
	// which alert's runbook lists a reason.
	MixinConfig = "mixin/config.libsonnet"
)

// File is a file `make generate` writes: its path from the repository's
// root (with slashes) and what it must hold.
type File struct {
	Path string
	Data []byte
}

// Problem is what keeps a file from being generated: the file to change
// and what is wrong.
type Problem struct{ File, Msg string }

func (p Problem) String() string { return p.File + ": " + p.Msg }

// Files renders every generated file from the files under root and the
// table kinds. A file with problems (a marker missing, a kind without
// its section in docs/configuration.md or without a description of a
// reason) is still rendered as far as it can be; the problems say what
// to fix. err is for a file that cannot be read.
func Files(root string, kinds []provider.Kind) ([]File, []Problem, error) {
	var probs []Problem
	for _, k := range kinds {
		for _, p := range k.DocProblems() {
			probs = append(probs, Problem{kindPackage(k), p})
		}
	}
	out, err := SchemaFiles(root, kinds)
	if err != nil {
		return nil, nil, err
	}
	read := func(rel string) (string, error) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		return string(b), err
	}
	libsonnet, err := read(MixinConfig)
	if err != nil {
		return nil, nil, err
	}
	actionRequired, err := ActionRequiredReasons(libsonnet)
	if err != nil {
		probs = append(probs, Problem{MixinConfig, err.Error()})
	}
	for _, page := range []struct {
		path  string
		parts func([]provider.Kind) map[string]string
	}{
		{ReadmeDoc, readmeParts},
		{MetricsDoc, metricsParts},
		{ConfigDoc, configParts},
		{RunbookDoc, func(kinds []provider.Kind) map[string]string { return runbookParts(kinds, actionRequired) }},
	} {
		text, err := read(page.path)
		if err != nil {
			return nil, nil, err
		}
		parts := page.parts(kinds)
		for name, md := range parts {
			parts[name] = relink(md, page.path)
		}
		got, missing := Replace(text, parts)
		for _, m := range missing {
			probs = append(probs, Problem{page.path, m})
		}
		out = append(out, File{page.path, []byte(got)})
	}
	return out, probs, nil
}

// kindPackage names the directory of kind k's package, where its
// KindDoc is: the package of its entry type.
func kindPackage(k provider.Kind) string {
	if k.Section().New == nil {
		return "the package of kind " + k.Name()
	}
	typ := reflect.TypeOf(k.Section().New())
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	return strings.TrimPrefix(typ.PkgPath(), modulePath+"/")
}

// modulePath is the module's path, which a package's path starts with.
const modulePath = "github.com/egress-proxies/provider_health_exporter"

var beginRE = regexp.MustCompile(`(?m)^<!-- BEGIN GENERATED: ([^>]*?) -->\n`)

// Replace puts parts[name] between the markers of each name in text. It
// says which marker is missing, unpaired or of no part; such a part is
// left as it is.
func Replace(text string, parts map[string]string) (string, []string) {
	var out strings.Builder
	var probs []string
	seen := map[string]bool{}
	rest := text
	for {
		m := beginRE.FindStringSubmatchIndex(rest)
		if m == nil {
			out.WriteString(rest)
			break
		}
		name := rest[m[2]:m[3]]
		end := "<!-- END GENERATED: " + name + " -->\n"
		j := strings.Index(rest[m[1]:], end)
		if j < 0 {
			probs = append(probs, fmt.Sprintf("marker <!-- BEGIN GENERATED: %s --> has no <!-- END GENERATED: %s --> after it", name, name))
			seen[name] = true
			out.WriteString(rest)
			break
		}
		out.WriteString(rest[:m[1]])
		body, ok := parts[name]
		switch {
		case !ok:
			probs = append(probs, fmt.Sprintf("marker <!-- BEGIN GENERATED: %s --> names no part make generate writes (remove it, or fix its name)", name))
			out.WriteString(rest[m[1] : m[1]+j])
		case seen[name]:
			probs = append(probs, fmt.Sprintf("the part %s is between markers twice", name))
			out.WriteString(rest[m[1] : m[1]+j])
		default:
			out.WriteString("\n" + strings.TrimSpace(body) + "\n\n")
		}
		seen[name] = true
		out.WriteString(end)
		rest = rest[m[1]+j+len(end):]
	}
	for _, name := range sortedKeys(parts) {
		if !seen[name] {
			probs = append(probs, fmt.Sprintf("no markers <!-- BEGIN GENERATED: %s --> and <!-- END GENERATED: %s --> for the part make generate writes there%s", name, name, partHint(name)))
		}
	}
	return out.String(), probs
}

// partHint says where the markers of a kind's part go.
func partHint(name string) string {
	if kind, ok := strings.CutPrefix(name, "reasons "); ok {
		return fmt.Sprintf(" (kind %s: its section ### %s needs a Reasons heading with the markers under it)", kind, kind)
	}
	return ""
}

var linkRE = regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]*)?\)`)

// relink makes each link of md, which names its page from the
// repository's root (docs/configuration.md#kvm), relative to page.
func relink(md, page string) string {
	return linkRE.ReplaceAllStringFunc(md, func(l string) string {
		m := linkRE.FindStringSubmatch(l)
		target, frag := m[1], m[2]
		if target == "" || strings.Contains(target, "://") {
			return l
		}
		if target == page {
			return "](" + frag + ")"
		}
		rel, err := filepath.Rel(filepath.Dir(filepath.FromSlash(page)), filepath.FromSlash(target))
		if err != nil {
			return l
		}
		return "](" + filepath.ToSlash(rel) + frag + ")"
	})
}

var actionRequiredRE = regexp.MustCompile(`(?s)actionRequiredReasons: \[(.*?)\]`)

// ActionRequiredReasons reads the list of that name in the mixin's
// config.libsonnet: the reasons that raise ProviderActionRequired.
func ActionRequiredReasons(libsonnet string) (map[provider.Reason]bool, error) {
	m := actionRequiredRE.FindStringSubmatch(libsonnet)
	if m == nil {
		return nil, fmt.Errorf("no actionRequiredReasons list")
	}
	out := map[provider.Reason]bool{}
	for _, item := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(m[1], -1) {
		out[provider.Reason(item[1])] = true
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("actionRequiredReasons is empty: %s", m[1])
	}
	return out, nil
}

// Stale lists the files of files whose content under root differs.
func Stale(root string, files []File) ([]string, error) {
	var out []string
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f.Path)))
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(got, f.Data) {
			out = append(out, f.Path)
		}
	}
	return out, nil
}

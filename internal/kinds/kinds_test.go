package kinds

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestSharedReasonTextsNameNoOtherKind: a shared reason's description as
// a kind gives it (its meaning, what to do, its runbook item) names no
// other kind of the table and leaves no placeholder unfilled: a kind
// inherits no other kind's advice, whatever it describes itself.
func TestSharedReasonTextsNameNoOtherKind(t *testing.T) {
	kinds := Builtin()
	for _, k := range kinds {
		for _, r := range k.Reasons().Reasons() {
			if !provider.IsShared(r) {
				continue
			}
			d, _ := k.ReasonDoc(r)
			runbook, _ := k.RunbookText(r)
			for _, text := range []string{d.Means, d.Action, runbook} {
				if strings.ContainsAny(text, "{}") && regexp.MustCompile(`\{[a-z]+\}`).MatchString(text) {
					t.Errorf("kind %s, reason %s: a placeholder left in %q", k.Name(), r, text)
				}
				for _, o := range kinds {
					if o.Name() == k.Name() {
						continue
					}
					words := regexp.QuoteMeta(o.Name()) + "|" + regexp.QuoteMeta(o.Doc().Title)
					if m := regexp.MustCompile(`(?i)\b(` + words + `)\b`).FindString(text); m != "" {
						t.Errorf("kind %s, reason %s names kind %s (%q): %s", k.Name(), r, o.Name(), m, text)
					}
				}
			}
		}
		if probs := k.DocProblems(); len(probs) > 0 {
			t.Error(strings.Join(probs, "; "))
		}
	}
}

// TestKindsListTheClassifiersTheyCall: a kind whose package calls a
// shared classifier lists it in its row (KindOf.Classifiers). Without
// the line, the kind's set may lack the classifier's reasons, which every
// check accepts, and a verdict of one becomes Unknown at run time.
func TestKindsListTheClassifiersTheyCall(t *testing.T) {
	providerPkg := reflect.TypeFor[provider.Kind]().PkgPath()
	module := strings.TrimSuffix(providerPkg, "/provider")
	root := filepath.Join("..", "..")
	// The shared classifiers: provider's variables made by NewClassifier,
	// by the Go name a kind's package calls them with and their Name.
	declared := regexp.MustCompile(`(?m)^var (\w+) = NewClassifier\("([^"]+)"`)
	classifiers := map[string]string{}
	files, err := filepath.Glob(filepath.Join(root, "provider", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range declared.FindAllStringSubmatch(string(b), -1) {
			classifiers[m[1]] = m[2]
		}
	}
	if classifiers["TransportErrors"] != provider.TransportErrors.Name() {
		t.Fatalf("found the classifiers %v, not provider.TransportErrors", classifiers)
	}
	for _, k := range Builtin() {
		pkg := reflect.TypeOf(k.Section().New()).Elem().PkgPath()
		dir := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(pkg, module+"/")))
		called := callsOf(t, dir, classifiers)
		if len(called) == 0 && k.Name() != "kvm" {
			t.Errorf("kind %s: no shared classifier called in %s; is the directory right?", k.Name(), dir)
		}
		for _, name := range called {
			if !slices.ContainsFunc(k.Classifiers(), func(c provider.Classifier) bool { return c.Name() == name }) {
				t.Errorf("kind %s calls %s but its row does not list it in KindOf.Classifiers", k.Name(), name)
			}
		}
	}
}

// callsOf names the shared classifiers the Go files of dir (not its
// tests) refer to as provider.X.
func callsOf(t *testing.T, dir string, classifiers map[string]string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "provider" {
				if name, ok := classifiers[sel.Sel.Name]; ok && !slices.Contains(out, name) {
					out = append(out, name)
				}
			}
			return true
		})
	}
	return out
}

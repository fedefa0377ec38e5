package layout

import (
	"errors"
	"go/build"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/egress-proxies/provider_health_exporter"

// The layers of docs/development.md's "How it fits together": a package
// imports only packages of its own layer's allowed list (and the helpers
// under internal/ that are none of these). cmd → kinds → provider;
// cmd → engine → exposition → provider.
var (
	kindsAPI   = "provider"
	engine     = "internal/engine"
	exposition = "internal/exposition"
	// forbidden lists, for a package, the packages it must not import.
	forbidden = func(pkg string) []string {
		switch {
		case pkg == kindsAPI:
			// What a kind's author reads imports nothing of the engine,
			// the exposition, a kind or the command.
			return []string{engine, exposition, "collector/", "internal/toykind", "cmd/"}
		case pkg == exposition:
			return []string{engine, "collector/", "internal/toykind", "cmd/"}
		case pkg == engine:
			return []string{"collector/", "internal/toykind", "cmd/"}
		case isKind(pkg):
			// A kind imports the kinds' API, never the engine or the
			// exposition (its tests may run it through the engine).
			return []string{engine, exposition, "cmd/"}
		}
		return nil
	}
)

func isKind(pkg string) bool {
	return strings.HasPrefix(pkg, "collector/") || pkg == "internal/toykind"
}

// imports are the module's packages that pkg's non-test files import,
// with every build tag of the repository set, relative to the module.
func imports(t *testing.T, ctx *build.Context, root, pkg string) []string {
	t.Helper()
	p, err := ctx.ImportDir(filepath.Join(root, pkg), 0)
	if err != nil {
		if noGo := (*build.NoGoError)(nil); errors.As(err, &noGo) {
			return nil
		}
		t.Fatalf("%s: %v", pkg, err)
	}
	var out []string
	for _, imp := range p.Imports {
		if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
			out = append(out, rel)
		}
	}
	return out
}

// TestImportDirection: no package imports across the layers the wrong
// way, build-tagged files included. A kind that imports the engine, the
// kinds' API that imports the exposition, or the exposition that calls
// back into the engine fails here, naming the file's package and the
// import.
func TestImportDirection(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx := build.Default
	ctx.BuildTags = []string{"integration", "toykind", "promtool", "browser", "demo", "e2e", "release"}
	ctx.CgoEnabled = false
	checked := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "tools" || name == "deploy") {
			return filepath.SkipDir
		}
		bad := forbidden(rel)
		if bad == nil {
			return nil
		}
		checked[rel] = true
		for _, imp := range imports(t, &ctx, root, rel) {
			for _, b := range bad {
				if imp == b || (strings.HasSuffix(b, "/") && strings.HasPrefix(imp, b)) {
					t.Errorf("%s imports %s: imports run cmd → kinds → %s and cmd → %s → %s → %s only (docs/development.md: \"How it fits together\")",
						rel, imp, kindsAPI, engine, exposition, kindsAPI)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The check must see the packages it is about: a move that leaves
	// it looking at nothing fails too.
	for _, must := range []string{kindsAPI, engine, exposition, "collector/kvm", "collector/gcp", "collector/kubernetes", "internal/toykind"} {
		if !checked[must] {
			t.Errorf("package %s not found under %s", must, root)
		}
	}
}

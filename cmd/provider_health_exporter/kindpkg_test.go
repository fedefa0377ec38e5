package main

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestDocsRecipeKindPackages holds every kind of the table (the toy
// kind's too under -tags toykind) to the package rule of
// docs/development.md's "Adding a provider": the kind's entry type is in
// a package of its own, not in package config and no other kind's, named
// after the kind (or <kind>kind), and that name is no standard library
// package's, which it would shadow in every file that imports both.
func TestDocsRecipeKindPackages(t *testing.T) {
	t.Parallel()
	kinds, err := kindTable()
	if err != nil {
		t.Fatal(err)
	}
	std := stdPackageNames(t)
	owner := map[string]string{}
	for _, k := range kinds {
		typ := reflect.TypeOf(k.Section().New())
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		pkg := typ.PkgPath()
		name := path.Base(pkg)
		switch {
		case strings.HasSuffix(pkg, "/config"):
			t.Errorf("kind %s: its entry type %s is in package config; it belongs in the kind's package", k.Name(), typ)
		case owner[pkg] != "":
			t.Errorf("kind %s: its entry type %s is in the package of kind %s", k.Name(), typ, owner[pkg])
		case name != k.Name() && name != k.Name()+"kind":
			t.Errorf("kind %s: package %s is named neither %s nor %skind", k.Name(), pkg, k.Name(), k.Name())
		case std[name] != "":
			t.Errorf("kind %s: package %s has the name of the standard library's %s: name it %skind", k.Name(), pkg, std[name], k.Name())
		}
		owner[pkg] = k.Name()
	}
}

// recipeLayout is where docs/development.md's "Adding a provider" puts
// each part of a kind, by file of the kind's package (<kind>.go is named
// after the kind): the top-level names each file must declare.
var recipeLayout = map[string][]string{
	"classify.go": {"Name", "Reasons"},
	"config.go":   {"Entry", "Section"},
	"<kind>.go":   {"Checker", "New"},
	"kind.go":     {"Kind"},
}

// TestDocsRecipeKindLayout holds every kind of the table (the toy kind's
// too under -tags toykind) to the layout of docs/development.md's "Adding
// a provider": its name and reasons in classify.go, its configuration in
// config.go, its checker in <kind>.go and its Kind in kind.go, so that
// the kinds the recipe points to as examples are written the way it says.
func TestDocsRecipeKindLayout(t *testing.T) {
	t.Parallel()
	kinds, err := kindTable()
	if err != nil {
		t.Fatal(err)
	}
	recipe := mdSection(repoFile(t, "docs/development.md"), "## ", "Adding a provider")
	for file := range recipeLayout {
		if !strings.Contains(recipe, "`"+file+"`") && !strings.Contains(recipe, "/"+file+"`") {
			t.Errorf("docs/development.md, section Adding a provider, does not name %s", file)
		}
	}
	for _, k := range kinds {
		typ := reflect.TypeOf(k.Section().New())
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		dir, ok := strings.CutPrefix(typ.PkgPath(), "github.com/egress-proxies/provider_health_exporter/")
		if !ok {
			t.Errorf("kind %s: its package %s is not in this module", k.Name(), typ.PkgPath())
			continue
		}
		for file, names := range recipeLayout {
			file = strings.ReplaceAll(file, "<kind>", k.Name())
			path := filepath.Join("..", "..", filepath.FromSlash(dir), file)
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Errorf("kind %s: %v (docs/development.md: \"Adding a provider\")", k.Name(), err)
				continue
			}
			declared := topLevelNames(f)
			for _, name := range names {
				if !declared[name] {
					t.Errorf("kind %s: %s/%s does not declare %s, which docs/development.md's \"Adding a provider\" puts there", k.Name(), dir, file, name)
				}
			}
		}
	}
}

// topLevelNames are the names f declares at its top level, methods aside.
func topLevelNames(f *ast.File) map[string]bool {
	out := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				out[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					out[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						out[n.Name] = true
					}
				}
			}
		}
	}
	return out
}

// stdPackageNames maps the last element of each importable standard
// library package's path to the path (http: net/http), from GOROOT's
// sources.
func stdPackageNames(t *testing.T) map[string]string {
	t.Helper()
	src := filepath.Join(build.Default.GOROOT, "src")
	out := map[string]string{}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch base := d.Name(); {
			case rel == "cmd", base == "testdata", base == "vendor", base == "internal":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			dir := path.Dir(rel)
			out[path.Base(dir)] = dir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"http", "json", "time", "net"} {
		if out[want] == "" {
			t.Fatalf("GOROOT %s: no standard library package %s among %d found", build.Default.GOROOT, want, len(out))
		}
	}
	return out
}

package main

import (
	"go/build"
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

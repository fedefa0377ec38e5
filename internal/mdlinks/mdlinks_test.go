package mdlinks

import (
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// repoFiles lists the repository's tracked files and the untracked ones not
// ignored, so a page being written is checked before it is committed.
func repoFiles(t *testing.T) (root string, files []string) {
	t.Helper()
	root = "../.."
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v (the link check needs the git checkout)", root, err)
	}
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if _, err := os.Stat(path.Join(root, f)); err == nil { // deleted but not yet staged
			files = append(files, f)
		}
	}
	return root, files
}

// TestRepositoryLinks: every relative link and #anchor of every Markdown file
// of the repository resolves.
func TestRepositoryLinks(t *testing.T) {
	root, files := repoFiles(t)
	var md []string
	for _, f := range files {
		if strings.HasSuffix(f, ".md") {
			md = append(md, f)
		}
	}
	if !slices.Contains(md, "README.md") {
		t.Fatalf("README.md not among the repository's files %v", md)
	}
	probs, err := CheckLinks(os.DirFS(root), md)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Error(p)
	}
}

// TestRepositoryCitations: every comment citing a section of the README or a
// page under docs/ names a section that exists.
func TestRepositoryCitations(t *testing.T) {
	root, files := repoFiles(t)
	var src []string
	for _, f := range files {
		if strings.HasPrefix(f, "internal/mdlinks/") { // its tests cite pages that do not exist on purpose
			continue
		}
		base := path.Base(f)
		switch {
		case base == "Makefile", base == "Dockerfile",
			slices.Contains([]string{".go", ".sh", ".libsonnet", ".jsonnet", ".yaml", ".yml"}, path.Ext(f)):
			src = append(src, f)
		}
	}
	probs, err := CheckCitations(os.DirFS(root), src)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Error(p)
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Quick start":                             "quick-start",
		"Monitoring mixin: alerts and dashboard":  "monitoring-mixin-alerts-and-dashboard",
		"min_interval protects the API quota":     "min_interval-protects-the-api-quota",
		"What the exporter bounds":                "what-the-exporter-bounds",
		"`--web.route-prefix` and the [proxy](x)": "--webroute-prefix-and-the-proxy",
		"Against virsh (10 hosts, 2× faster)":     "against-virsh-10-hosts-2-faster",
		"Ünïcode — kept":                          "ünïcode--kept",
	} {
		if got := Slug(strings.ReplaceAll(in, "`", "")); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckLinks(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md": {Data: []byte("# Title\n## Reasons\n## Reasons\n" +
			"[ok](#reasons-1) [ok](docs/a.md#sub-section) [ok](docs/) [ext](https://example.com/x#y)\n" +
			"[bad](#reasons-2) [bad](docs/b.md) [bad](docs/a.md#nope)\n" +
			"`[code](#not-a-link)`\n```\n[fenced](#not-a-link)\n```\n[ref]: docs/missing.md\n")},
		"docs/a.md": {Data: []byte("# A\n### Sub section\n[up](../README.md#title) [bad](../README.md#a)\n")},
	}
	probs, err := CheckLinks(fsys, []string{"README.md", "docs/a.md"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range probs {
		got = append(got, p.String())
	}
	want := []string{
		`README.md:5: link "#reasons-2": README.md has no heading with anchor #reasons-2 (did you mean #reasons?)`,
		`README.md:5: link "docs/b.md": docs/b.md does not exist`,
		`README.md:5: link "docs/a.md#nope": docs/a.md has no heading with anchor #nope`,
		`README.md:10: link "docs/missing.md": docs/missing.md does not exist`,
		`docs/a.md:3: link "../README.md#a": README.md has no heading with anchor #a`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckCitations(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md":   {Data: []byte("# X\n## Quick start\n")},
		"docs/m.md":   {Data: []byte("# Metrics\n## Reasons\n### `min_interval` protects\n")},
		"a.go":        {Data: []byte("// ok (docs/m.md: \"Reasons\") and (README: \"Quick start\")\n// ok (docs/m.md: \"Reasons\",\n// \"min_interval protects\")\n// bad (docs/m.md: \"Reasonz\")\n// ok (README: \"Quick\n// start\"), bad (docs/m.md: \"Min\n// interval\")\n")},
		"b.libsonnet": {Data: []byte("// bad: the README's \"Reasons\"\n")},
		"c.yaml":      {Data: []byte("# bad (docs/nope.md: \"X\")\nkey: README.md\n")},
	}
	probs, err := CheckCitations(fsys, []string{"a.go", "b.libsonnet", "c.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range probs {
		got = append(got, p.String())
	}
	want := []string{
		`a.go:4: cites docs/m.md: "Reasonz", which has no such section`,
		`a.go:6: cites docs/m.md: "Min interval", which has no such section`,
		`b.libsonnet:1: cites README.md: "Reasons", which has no such section`,
		`c.yaml:1: cites docs/nope.md, which does not exist`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

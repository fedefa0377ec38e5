package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDockerfileBuildsEveryPromuPlatform checks, without a Docker engine,
// that the Dockerfile is a buildx multi-platform build (the toolchain on
// the builder's platform, the binary for the target's) and that every
// platform .promu.yml releases is either compiled by `make cross` or is
// the amd64 CI builds natively.
func TestDockerfileBuildsEveryPromuPlatform(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	df, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// Continuation lines joined, comments dropped: one instruction a line.
	text := regexp.MustCompile(`(?m)^\s*#.*\n`).ReplaceAllString(string(df), "")
	text = strings.ReplaceAll(text, "\\\n", " ")
	var build []string // the instructions of the build stage
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "FROM ") && build != nil {
			break
		}
		if strings.HasPrefix(line, "FROM ") && strings.Contains(line, "golang:") {
			build = []string{}
		}
		if build != nil && line != "" {
			build = append(build, line)
		}
	}
	if len(build) == 0 {
		t.Fatal("Dockerfile: no golang build stage")
	}
	if !strings.HasPrefix(build[0], "FROM --platform=$BUILDPLATFORM ") {
		t.Errorf("Dockerfile: %q: the build stage must run on $BUILDPLATFORM, or buildx emulates the toolchain", build[0])
	}
	for _, arg := range []string{"ARG TARGETOS", "ARG TARGETARCH"} {
		if !slices.Contains(build, arg) {
			t.Errorf("Dockerfile: the build stage lacks %q", arg)
		}
	}
	goBuild := regexp.MustCompile(`\bGOOS=\$\{?TARGETOS\}? GOARCH=\$\{?TARGETARCH\}? go build\b`)
	if !slices.ContainsFunc(build, goBuild.MatchString) {
		t.Errorf("Dockerfile: no `GOOS=$TARGETOS GOARCH=$TARGETARCH go build` in the build stage:\n%s", strings.Join(build, "\n"))
	}

	promu, err := os.ReadFile(filepath.Join(root, ".promu.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Crossbuild struct {
			Platforms []string `yaml:"platforms"`
		} `yaml:"crossbuild"`
	}
	if err := yaml.Unmarshal(promu, &p); err != nil {
		t.Fatalf(".promu.yml: %v", err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CROSS_PLATFORMS\s*\?=\s*(.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no CROSS_PLATFORMS")
	}
	cross := strings.Fields(string(m[1]))
	if !regexp.MustCompile(`(?m)^test:.*\bcross\b`).Match(mk) {
		t.Error("Makefile: `make test` does not run `cross`")
	}
	for _, platform := range p.Crossbuild.Platforms {
		if platform != "linux/amd64" && !slices.Contains(cross, platform) {
			t.Errorf(".promu.yml releases %s, which `make cross` does not compile (CROSS_PLATFORMS %q)", platform, cross)
		}
	}
	if len(p.Crossbuild.Platforms) == 0 {
		t.Error(".promu.yml: no crossbuild platforms")
	}
}

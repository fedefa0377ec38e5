// Command ocibuild builds the exporter's container image without a Docker
// daemon, for `make image-oci`: it cross-compiles the exporter for each
// platform of the Dockerfile's buildx build (linux/amd64, linux/arm64) with
// the Dockerfile's flags and writes one multi-platform image, as an OCI
// image layout, that `crane push DIR REF` (crane is pinned in tools/go.mod)
// pushes to any registry:
//
//	go -C tools run ./ocibuild -repo .. -out ../.build/image-oci
//
// The image holds what the Dockerfile's (distroless static, nonroot) gives
// the exporter: the static binary at /bin/provider_health_exporter, the CA
// certificates of the build machine (/etc/ssl/certs/ca-certificates.crt,
// Debian's ca-certificates; the Compute API and API servers are reached
// over TLS), passwd and group entries for the nonroot user 65534 it runs
// as, /tmp, port 9877, and the same entrypoint and default flags, and the
// LICENSE file at /LICENSE; the OCI labels of docs/deployment.md ("The
// image"). No base image is pulled: the build needs no network. The files'
// times, the image's creation time and its history entry are the commit's,
// so two builds of one commit and binary give the same image.
//
// With -binaries DIR it compiles nothing: DIR/OS-ARCH/provider_health_exporter
// is each platform's binary, the one `make release` built once with promu
// and put into that platform's tarball, so that the image runs the very
// file sha256sums.txt covers.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where the image keeps what the Dockerfile's does.
const (
	binaryPath  = "/bin/provider_health_exporter"
	caPath      = "/etc/ssl/certs/ca-certificates.crt"
	user        = "65534:65534"
	port        = "9877/tcp"
	source      = "https://github.com/egress-proxies/provider_health_exporter"
	licensePath = "/LICENSE"
)

// platforms are those of .promu.yml's crossbuild and the Dockerfile's
// buildx line.
var platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

type options struct {
	repo      string    // the repository's root
	out       string    // the OCI image layout to write (replaced)
	version   string    // VERSION
	revision  string    // the commit
	branch    string    // the branch
	created   time.Time // the commit's time
	caBundle  string    // the CA certificates to copy into the image
	binaries  string    // built binaries, DIR/OS-ARCH/provider_health_exporter; "" compiles them
	platforms []v1.Platform
	license   []byte // the repository's LICENSE, read by build
}

func main() {
	repo := flag.String("repo", "..", "the repository's root")
	out := flag.String("out", "", "the OCI image layout to write (a directory, replaced)")
	caBundle := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA certificates to put into the image")
	binaries := flag.String("binaries", "", "take each platform's binary from DIR/OS-ARCH/provider_health_exporter instead of compiling it")
	only := flag.String("platforms", "", "comma-separated OS/ARCH of the image (default: every platform of .promu.yml's crossbuild)")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: ocibuild [-repo DIR] [-ca-bundle FILE] [-binaries DIR] -out DIR")
		os.Exit(2)
	}
	o, err := fromRepository(*repo)
	if err == nil {
		o.out, o.caBundle, o.binaries = *out, *caBundle, *binaries
		o.platforms, err = selectPlatforms(*only)
	}
	if err == nil {
		err = build(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ocibuild:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s: provider_health_exporter %s (%s) for %d platforms; push it with: go tool -modfile=tools/go.mod crane push %s REGISTRY/REPOSITORY:%s\n",
		o.out, o.version, o.revision, len(o.platforms), o.out, o.version)
}

// selectPlatforms is the platforms of list ("linux/amd64,linux/arm64"),
// each one of platforms; every platform when list is empty (make release
// RELEASE_PLATFORMS=linux/amd64 builds one).
func selectPlatforms(list string) ([]v1.Platform, error) {
	if list == "" {
		return platforms, nil
	}
	var out []v1.Platform
	for _, name := range strings.Split(list, ",") {
		goos, goarch, _ := strings.Cut(strings.TrimSpace(name), "/")
		i := slices.IndexFunc(platforms, func(p v1.Platform) bool { return p.OS == goos && p.Architecture == goarch })
		if i < 0 {
			return nil, fmt.Errorf("platform %q: want one of linux/amd64, linux/arm64", name)
		}
		out = append(out, platforms[i])
	}
	return out, nil
}

// fromRepository reads the version from VERSION and the revision, branch
// and time of the checked-out commit.
func fromRepository(repo string) (options, error) {
	v, err := os.ReadFile(filepath.Join(repo, "VERSION"))
	if err != nil {
		return options{}, err
	}
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	o := options{repo: repo, version: strings.TrimSpace(string(v))}
	if o.revision, err = git("rev-parse", "HEAD"); err != nil {
		return o, err
	}
	if o.branch, err = git("rev-parse", "--abbrev-ref", "HEAD"); err != nil {
		return o, err
	}
	ct, err := git("log", "-1", "--format=%ct")
	if err != nil {
		return o, err
	}
	secs, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return o, fmt.Errorf("commit time %q: %w", ct, err)
	}
	o.created = time.Unix(secs, 0).UTC()
	return o, nil
}

// build compiles the exporter for every platform and writes the image
// index to o.out as an OCI image layout with that one index in it.
func build(o options) error {
	ca, err := os.ReadFile(o.caBundle)
	if err != nil {
		return fmt.Errorf("CA certificates for the image: %w", err)
	}
	if o.license, err = os.ReadFile(filepath.Join(o.repo, "LICENSE")); err != nil {
		return fmt.Errorf("the license for the image: %w", err)
	}
	bins, err := os.MkdirTemp("", "ocibuild-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bins)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.platforms {
		bin := filepath.Join(bins, p.OS+"-"+p.Architecture)
		if o.binaries != "" {
			// The release's binary, built once: not compiled again.
			bin = filepath.Join(o.binaries, p.OS+"-"+p.Architecture, "provider_health_exporter")
		} else if err := compile(o, p, bin); err != nil {
			return err
		}
		img, err := image(o, p, bin, ca)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", p.OS, p.Architecture, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	if err := os.RemoveAll(o.out); err != nil {
		return err
	}
	l, err := layout.Write(o.out, empty.Index)
	if err != nil {
		return err
	}
	return l.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.version}))
}

// compile builds the exporter as the Dockerfile does: static, no cgo, the
// version stamped by .promu.yml's ldflags.
func compile(o options, p v1.Platform, out string) error {
	pkg := "github.com/prometheus/common/version"
	ldflags := strings.Join([]string{
		"-s", "-w",
		"-X", pkg + ".Version=" + o.version,
		"-X", pkg + ".Revision=" + o.revision,
		"-X", pkg + ".Branch=" + o.branch,
		"-X", pkg + ".BuildUser=ocibuild",
		"-X", pkg + ".BuildDate=" + o.created.Format("20060102-15:04:05"),
	}, " ")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "netgo", "-ldflags", ldflags, "-o", out, "./cmd/provider_health_exporter")
	cmd.Dir = o.repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build for %s/%s: %w\n%s", p.OS, p.Architecture, err, msg)
	}
	return nil
}

// image is one platform's image: a single layer on no base, and the
// Dockerfile's configuration.
func image(o options, p v1.Platform, bin string, ca []byte) (v1.Image, error) {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	files, err := rootfs(o.created, exe, ca, o.license)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(files)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	// The history entry is dated with the commit, as the image is (the
	// zero time read as year 1).
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: o.created},
			CreatedBy: "ocibuild (tools/ocibuild): provider_health_exporter " + o.version + " for " + p.OS + "/" + p.Architecture,
			Comment:   "the static binary, CA certificates, nonroot user and LICENSE",
		},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = p.OS, p.Architecture, v1.Time{Time: o.created}
	cf.Config = v1.Config{
		User:         user,
		Entrypoint:   []string{binaryPath},
		Cmd:          []string{"--config.file=/etc/provider_health/provider_health.yml"},
		ExposedPorts: map[string]struct{}{port: {}},
		Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + caPath},
		// The pre-defined annotation keys of the OCI image spec
		// (annotations.md), as labels, which registries and scanners show.
		Labels: map[string]string{
			"org.opencontainers.image.title":         "provider_health_exporter",
			"org.opencontainers.image.description":   "Prometheus exporter: can each infrastructure provider (Kubernetes, GCP, KVM) host egress proxies right now, and if not, why not",
			"org.opencontainers.image.version":       o.version,
			"org.opencontainers.image.revision":      o.revision,
			"org.opencontainers.image.source":        source,
			"org.opencontainers.image.url":           source,
			"org.opencontainers.image.documentation": source + "/blob/" + o.revision + "/README.md",
			"org.opencontainers.image.licenses":      "Apache-2.0",
			"org.opencontainers.image.vendor":        "egress-proxies",
			"org.opencontainers.image.created":       o.created.Format(time.RFC3339),
		},
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the image's one layer as a tar stream.
func rootfs(mtime time.Time, exe, ca, license []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	for _, d := range []struct {
		name string
		mode int64
	}{{"bin", 0o755}, {"etc", 0o755}, {"etc/ssl", 0o755}, {"etc/ssl/certs", 0o755}, {"tmp", 0o1777}} {
		if err := dir(d.name, d.mode); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		name string
		mode int64
		body []byte
	}{
		{strings.TrimPrefix(binaryPath, "/"), 0o755, exe},
		{strings.TrimPrefix(caPath, "/"), 0o644, ca},
		{strings.TrimPrefix(licensePath, "/"), 0o644, license},
		// The user the Deployment's securityContext runs it as, by name
		// too, as distroless's nonroot images have it.
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n")},
		{"etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")},
	} {
		if err := file(f.name, f.mode, f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

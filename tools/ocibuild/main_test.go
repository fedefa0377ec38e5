package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestBuildImage builds the image of `make image-oci` from this checkout
// and reads it back as crane push would: one index in the layout, one
// image per platform with the Dockerfile's user, entrypoint, flags and
// port, a layer with the binary, the CA certificates and the nonroot user,
// and a binary that runs on this machine's platform and reports the
// repository's VERSION.
func TestBuildImage(t *testing.T) {
	o, err := fromRepository(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	o.out = filepath.Join(t.TempDir(), "image-oci")
	o.caBundle = writeCA(t)
	o.platforms = platforms
	if err := build(o); err != nil {
		t.Fatal(err)
	}

	l, err := layout.ImageIndexFromPath(o.out)
	if err != nil {
		t.Fatal(err)
	}
	top, err := l.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("the layout holds %v; crane push pushes a layout of one entry, the multi-platform index", top.Manifests)
	}
	idx, err := l.ImageIndex(top.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		plat := d.Platform.OS + "/" + d.Platform.Architecture
		got = append(got, plat)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture || c.User != "65534:65534" ||
			!slices.Equal(c.Entrypoint, []string{"/bin/provider_health_exporter"}) ||
			!slices.Equal(c.Cmd, []string{"--config.file=/etc/provider_health/provider_health.yml"}) {
			t.Errorf("%s: config %s/%s, user %q, entrypoint %q, cmd %q: not the Dockerfile's", plat, cf.OS, cf.Architecture, c.User, c.Entrypoint, c.Cmd)
		}
		if _, ok := c.ExposedPorts["9877/tcp"]; !ok || c.Labels["org.opencontainers.image.version"] != o.version || !cf.Created.Time.Equal(o.created) {
			t.Errorf("%s: ports %v, labels %v, created %v", plat, c.ExposedPorts, c.Labels, cf.Created)
		}
		checkMetadata(t, plat, img, o)
		files := layerFiles(t, img)
		for name, mode := range map[string]int64{"bin/provider_health_exporter": 0o755, "etc/ssl/certs/ca-certificates.crt": 0o644, "etc/passwd": 0o644, "tmp/": 0o1777, "LICENSE": 0o644} {
			f, ok := files[name]
			if !ok || f.hdr.Mode != mode || f.hdr.Uid != 0 {
				t.Errorf("%s: %s in the layer: %v (mode %o, uid %d), want mode %o owned by root", plat, name, ok, f.hdr.Mode, f.hdr.Uid, mode)
			}
		}
		if !strings.Contains(string(files["etc/passwd"].body), ":65534:65534:") {
			t.Errorf("%s: /etc/passwd has no user 65534", plat)
		}
		if d.Platform.OS == runtime.GOOS && d.Platform.Architecture == runtime.GOARCH {
			exe := filepath.Join(t.TempDir(), "provider_health_exporter")
			if err := os.WriteFile(exe, files["bin/provider_health_exporter"].body, 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(exe, "--version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "version "+o.version) || !strings.Contains(string(out), o.revision) {
				t.Errorf("%s: the image's binary --version: %v\n%s\nwant version %s, revision %s", plat, err, out, o.version, o.revision)
			}
		}
	}
	slices.Sort(got)
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(got, want) {
		t.Errorf("platforms %v, want %v", got, want)
	}
}

// checkMetadata checks the labels users expect of an image (the OCI
// image spec's pre-defined keys) and that its history is dated with the
// commit, not year 1.
func checkMetadata(t *testing.T, plat string, img v1.Image, o options) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"title", "description", "version", "revision", "source", "url", "documentation", "licenses", "vendor", "created"} {
		if cf.Config.Labels["org.opencontainers.image."+key] == "" {
			t.Errorf("%s: no label org.opencontainers.image.%s: %v", plat, key, cf.Config.Labels)
		}
	}
	if got := cf.Config.Labels["org.opencontainers.image.licenses"]; got != "Apache-2.0" {
		t.Errorf("%s: licenses %q, want Apache-2.0 (LICENSE)", plat, got)
	}
	if len(cf.History) != 1 || !cf.History[0].Created.Time.Equal(o.created) {
		t.Errorf("%s: history %+v, want one entry dated %s", plat, cf.History, o.created)
	}
}

// TestBuildImageFromBinaries: with -binaries, each platform's image holds
// the very file given, byte for byte, and nothing is compiled.
func TestBuildImageFromBinaries(t *testing.T) {
	o, err := fromRepository(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	o.out = filepath.Join(t.TempDir(), "image-oci")
	o.caBundle = writeCA(t)
	o.platforms = platforms
	o.binaries = t.TempDir()
	want := map[string][]byte{}
	for _, p := range platforms {
		dir := filepath.Join(o.binaries, p.OS+"-"+p.Architecture)
		body := []byte("\x7fELF the release's " + p.Architecture + " binary")
		want[p.OS+"/"+p.Architecture] = body
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "provider_health_exporter"), body, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := build(o); err != nil {
		t.Fatal(err)
	}
	l, err := layout.ImageIndexFromPath(o.out)
	if err != nil {
		t.Fatal(err)
	}
	top, err := l.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	idx, err := l.ImageIndex(top.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		plat := d.Platform.OS + "/" + d.Platform.Architecture
		if got := layerFiles(t, img)["bin/provider_health_exporter"].body; string(got) != string(want[plat]) {
			t.Errorf("%s: the image's binary is %q, want the given file %q", plat, got, want[plat])
		}
		checkMetadata(t, plat, img, o)
	}
}

// TestImageIsReproducible: the same binary and commit give the same image
// digest, whenever it is built.
func TestImageIsReproducible(t *testing.T) {
	o := options{version: "1.2.3", revision: "abc", created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	var digests []v1.Hash
	for range 2 {
		img, err := image(o, platforms[0], writeTestBinary(t), []byte("ca"))
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of the same inputs: %s and %s", digests[0], digests[1])
	}
}

type layerFile struct {
	hdr  *tar.Header
	body []byte
}

func layerFiles(t *testing.T, img v1.Image) map[string]layerFile {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]layerFile{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = layerFile{h, body}
	}
	return out
}

func writeCA(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(p, []byte("-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeTestBinary(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, []byte("\x7fELF not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

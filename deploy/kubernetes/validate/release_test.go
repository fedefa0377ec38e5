//go:build release

package validate

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/egress-proxies/provider_health_exporter/deploy/kubernetes/validate/chart"
)

// TestRelease checks what `make release` built into PHE_RELEASE_DIR (make
// release-check sets it): what a tagged release publishes, all of one
// version, VERSION's. The tarballs of .promu.yml's platforms, each with the
// binary of its architecture stamped with the version, the license, README
// and docs; sha256sums.txt covering every tarball and the chart; the
// packaged chart whose version, appVersion and default image tag are the
// version; the OCI image layout whose index is tagged with it and whose
// images, one per platform, are labelled with it and the other OCI labels,
// hold the LICENSE, have a history dated with the commit, and run the very
// binary of that platform's tarball (one build per platform: the same
// sha256).
func TestRelease(t *testing.T) {
	dir := os.Getenv("PHE_RELEASE_DIR")
	if dir == "" {
		t.Fatal("PHE_RELEASE_DIR is not set: run make release-check")
	}
	version := releaseVersion(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	chartFile := "provider-health-exporter-" + version + ".tgz"
	want := []string{chartFile, "image-oci"}
	for _, arch := range []string{"amd64", "arm64"} {
		want = append(want, "provider_health_exporter-"+version+".linux-"+arch+".tar.gz")
	}
	want = append(want, "sha256sums.txt")
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("%s holds %v, want %v", dir, names, want)
	}
	sums := checkSums(t, dir)
	for _, f := range want {
		if _, ok := sums[f]; !ok && f != "image-oci" && f != "sha256sums.txt" {
			t.Errorf("sha256sums.txt has no line for %s", f)
		}
	}
	binaries := map[string]string{}
	for _, arch := range []string{"amd64", "arm64"} {
		binaries["linux/"+arch] = checkTarball(t, filepath.Join(dir, "provider_health_exporter-"+version+".linux-"+arch+".tar.gz"), version, arch)
	}
	checkPackagedChart(t, filepath.Join(dir, chartFile), version)
	images := checkImageLayout(t, filepath.Join(dir, "image-oci"), version)
	for platform, sum := range binaries {
		if images[platform] != sum {
			t.Errorf("%s: the image's binary has sha256 %s, the tarball's %s: not the one build", platform, images[platform], sum)
		} else {
			t.Logf("%s: the tarball and the image hold one binary, sha256 %s", platform, sum)
		}
	}
}

// checkSums checks every line of sha256sums.txt against its file and
// returns the files it names.
func checkSums(t *testing.T, dir string) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "sha256sums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Errorf("sha256sums.txt: line %q is not SUM  FILE", sc.Text())
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("sha256sums.txt: %v", err)
			continue
		}
		got := sha256.Sum256(data)
		if hex.EncodeToString(got[:]) != sum {
			t.Errorf("sha256sums.txt: %s has sha256 %x, the file says %s", name, got, sum)
		}
		out[name] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkTarball: the tarball unpacks into one directory named after it,
// holding the binary (an ELF of arch; run where it can, it reports the
// version), LICENSE, README.md and docs/. It returns the binary's sha256.
func checkTarball(t *testing.T, path, version, arch string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	top := "provider_health_exporter-" + version + ".linux-" + arch + "/"
	seen := map[string]bool{}
	sum := ""
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !strings.HasPrefix(h.Name, top) {
			t.Errorf("%s: %s is outside %s", path, h.Name, top)
			continue
		}
		name := strings.TrimPrefix(h.Name, top)
		seen[strings.SplitN(name, "/", 2)[0]] = true
		if name == "provider_health_exporter" {
			sum = checkBinary(t, tr, version, arch)
		}
	}
	for _, want := range []string{"provider_health_exporter", "LICENSE", "README.md", "docs"} {
		if !seen[want] {
			t.Errorf("%s has no %s", path, want)
		}
	}
	return sum
}

// checkBinary: an ELF of arch; where the test runs on arch, its --version
// names the version. It returns its sha256.
func checkBinary(t *testing.T, r io.Reader, version, arch string) string {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "provider_health_exporter")
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	e, err := elf.Open(tmp)
	if err != nil {
		t.Fatalf("the %s binary: %v", arch, err)
	}
	machine := e.Machine
	e.Close()
	if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]; machine != want {
		t.Errorf("the %s binary is for %s", arch, machine)
	}
	if arch == runtime.GOARCH {
		out, err := exec.CommandContext(t.Context(), tmp, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "version "+version+" ") {
			t.Errorf("the %s binary's --version: %v\n%s\nwant version %s", arch, err, out, version)
		}
	}
	return hex.EncodeToString(sum[:])
}

// checkPackagedChart: the packaged chart's version and appVersion are the
// version, and its default rendering runs the image of that tag.
func checkPackagedChart(t *testing.T, path, version string) {
	t.Helper()
	ch, err := loader.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != version || ch.Metadata.AppVersion != version {
		t.Errorf("%s: version %s, appVersion %s, want %s", path, ch.Metadata.Version, ch.Metadata.AppVersion, version)
	}
	out, err := chart.Template(t.Context(), path, chartRelease, chartNamespace, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range splitObjects(t, path, out) {
		if o.Kind != "Deployment" {
			continue
		}
		if !strings.Contains(string(o.doc), `image: "ghcr.io/egress-proxies/provider_health_exporter:`+version+`"`) {
			t.Errorf("%s: the Deployment does not run ghcr.io/egress-proxies/provider_health_exporter:%s:\n%s", path, version, o.doc)
		}
	}
}

// ociDescriptor is a descriptor of an OCI index.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

// checkImageLayout: the layout's index names one image index tagged with
// the version, whose images are those of linux/amd64 and linux/arm64, each
// labelled with the version and the other OCI labels users expect, with a
// history dated with the image (not year 1) and the LICENSE in its layer.
// It returns the sha256 of each platform's binary.
func checkImageLayout(t *testing.T, dir, version string) map[string]string {
	t.Helper()
	binaries := map[string]string{}
	blob := func(digest string, into any) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, "blobs", strings.Replace(digest, ":", "/", 1)))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, into); err != nil {
			t.Fatalf("%s: %v", digest, err)
		}
	}
	var top struct {
		Manifests []ociDescriptor `json:"manifests"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("index.json %s: want one image index tagged %s", data, version)
	}
	var idx struct {
		Manifests []ociDescriptor `json:"manifests"`
	}
	blob(top.Manifests[0].Digest, &idx)
	var platforms []string
	for _, m := range idx.Manifests {
		if m.Platform == nil {
			t.Errorf("image %s has no platform", m.Digest)
			continue
		}
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
		var manifest struct {
			Config ociDescriptor   `json:"config"`
			Layers []ociDescriptor `json:"layers"`
		}
		blob(m.Digest, &manifest)
		var cfg struct {
			Created string `json:"created"`
			Config  struct {
				Labels map[string]string `json:"Labels"`
			} `json:"config"`
			History []struct {
				Created string `json:"created"`
			} `json:"history"`
		}
		blob(manifest.Config.Digest, &cfg)
		if got := cfg.Config.Labels["org.opencontainers.image.version"]; got != version {
			t.Errorf("the %s image is labelled version %q, want %s", m.Platform.Architecture, got, version)
		}
		for _, key := range []string{"licenses", "description", "url", "documentation", "vendor", "source", "revision", "version", "created"} {
			if cfg.Config.Labels["org.opencontainers.image."+key] == "" {
				t.Errorf("the %s image has no label org.opencontainers.image.%s: %v", m.Platform.Architecture, key, cfg.Config.Labels)
			}
		}
		if len(cfg.History) == 0 || cfg.History[0].Created != cfg.Created || strings.HasPrefix(cfg.Created, "0001-") {
			t.Errorf("the %s image was created %s, its history %+v: want the history dated as the image, with the commit", m.Platform.Architecture, cfg.Created, cfg.History)
		}
		if len(manifest.Layers) != 1 {
			t.Errorf("the %s image has %d layers, want 1", m.Platform.Architecture, len(manifest.Layers))
			continue
		}
		files := layerSums(t, filepath.Join(dir, "blobs", strings.Replace(manifest.Layers[0].Digest, ":", "/", 1)))
		if files["LICENSE"] == "" {
			t.Errorf("the %s image has no LICENSE", m.Platform.Architecture)
		}
		binaries[m.Platform.OS+"/"+m.Platform.Architecture] = files["bin/provider_health_exporter"]
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("image platforms %v, want linux/amd64 and linux/arm64", platforms)
	}
	return binaries
}

// layerSums is the sha256 of each regular file of a gzipped layer.
func layerSums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		s := sha256.New()
		if _, err := io.Copy(s, tr); err != nil {
			t.Fatal(err)
		}
		out[h.Name] = hex.EncodeToString(s.Sum(nil))
	}
	return out
}

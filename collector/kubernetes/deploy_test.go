package kubernetes

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/provider_health_exporter/collector/gcp"
	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The kustomize base, relative to this package. The integration test creates
// it on a real API server; these checks are about its internal wiring.
const deployBase = "../../deploy/kubernetes"

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployBase, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func readManifest(t *testing.T, name string, into any) {
	t.Helper()
	data := mustRead(t, name)
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestKustomizationListsEveryManifest: a manifest left out of
// kustomization.yaml would be neither deployed nor checked.
func TestKustomizationListsEveryManifest(t *testing.T) {
	t.Parallel()
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Images     []any    `json:"images"`
		Generators []any    `json:"configMapGenerator"`
	}
	readManifest(t, "kustomization.yaml", &k)
	files, err := filepath.Glob(filepath.Join(deployBase, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var manifests []string
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" {
			manifests = append(manifests, base)
		}
	}
	listed := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(listed, manifests) {
		t.Errorf("kustomization.yaml resources = %v, files = %v", listed, manifests)
	}
}

// TestDeployedConfig: the ConfigMap's configuration (from the
// configMapGenerator) loads with the strict loader once the Secret's files
// are in place, the Deployment points --config.file at it, and every file
// it references comes from the Secret.
func TestDeployedConfig(t *testing.T) {
	t.Parallel()
	var k struct {
		Generators []struct {
			Name  string   `json:"name"`
			Files []string `json:"files"`
		} `json:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(mustRead(t, "kustomization.yaml"), &k); err != nil {
		t.Fatal(err)
	}
	if len(k.Generators) != 1 {
		t.Fatalf("kustomization.yaml has %d configMapGenerators, want 1", len(k.Generators))
	}
	// What kustomize generates from it (less the name's content hash, which
	// it also puts into the Deployment's reference).
	cm := corev1.ConfigMap{Data: map[string]string{}}
	cm.Name = k.Generators[0].Name
	for _, f := range k.Generators[0].Files {
		key, file, ok := strings.Cut(f, "=")
		if !ok {
			file = key
		}
		cm.Data[filepath.Base(key)] = string(mustRead(t, file))
	}
	var dep appsv1.Deployment
	readManifest(t, "deployment.yaml", &dep)

	spec := dep.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(spec.Containers))
	}
	ctr := spec.Containers[0]
	mounts := map[string]string{} // volume name -> mount path
	for _, m := range ctr.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	var configMount, secretMount, secretName string
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil && v.ConfigMap.Name == cm.Name:
			configMount = mounts[v.Name]
		case v.Secret != nil:
			secretMount, secretName = mounts[v.Name], v.Secret.SecretName
		}
	}
	if configMount == "" || secretMount == "" || secretName == "" {
		t.Fatalf("config mount %q, secret mount %q (secret %q): want both mounted", configMount, secretMount, secretName)
	}

	var configFile string
	for _, a := range ctr.Args {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			configFile = v
		}
	}
	key, ok := strings.CutPrefix(configFile, configMount+"/")
	if !ok {
		t.Fatalf("--config.file=%q is not under the config mount %s", configFile, configMount)
	}
	text, ok := cm.Data[key]
	if !ok {
		t.Fatalf("--config.file names key %q; the ConfigMap has %v", key, slices.Sorted(maps.Keys(cm.Data)))
	}

	// Stand in for the Secret: an empty file for every path under its mount.
	secrets := t.TempDir()
	for _, f := range referencedFiles(text, secretMount) {
		if err := os.WriteFile(filepath.Join(secrets, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Parse([]byte(strings.ReplaceAll(text, secretMount+"/", secrets+"/")), deployedSections)
	if err != nil {
		t.Fatalf("the ConfigMap's configuration does not load: %v", err)
	}
	if ks := config.EntriesOf[*Entry](cfg, Name); len(ks) == 0 || ks[0].Kubeconfig != "" {
		t.Errorf("want an in-cluster kubernetes entry (no kubeconfig), the ServiceAccount's RBAC is what deploy/kubernetes grants")
	}

	if got := ctr.Ports; len(got) != 1 || got[0].ContainerPort != 9877 {
		t.Errorf("ports = %v, want 9877", got)
	}
	// TCP probes pass with basic auth on (cmd/provider_health_exporter's
	// TestDeploymentProbesPassWithBasicAuth runs them against the binary).
	for name, p := range map[string]*corev1.Probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe} {
		if p == nil || p.TCPSocket == nil || p.TCPSocket.Port.String() != ctr.Ports[0].Name {
			t.Errorf("%s probe = %+v, want a tcpSocket probe of port %q", name, p, ctr.Ports[0].Name)
		}
	}
	if spec.ServiceAccountName != "provider-health-exporter" {
		t.Errorf("serviceAccountName = %q, want the account clusterrolebinding.yaml binds", spec.ServiceAccountName)
	}
}

// referencedFiles returns the names of the files text refers to under dir.
func referencedFiles(text, dir string) []string {
	var out []string
	for _, field := range strings.Fields(text) {
		if f, ok := strings.CutPrefix(field, dir+"/"); ok {
			out = append(out, f)
		}
	}
	return out
}

// TestHelmChartDefaultConfig: the Helm chart's default values.config, which
// the chart renders unchanged into its ConfigMap (deploy/kubernetes/validate's
// TestChartConfig), loads with the strict loader and is an in-cluster
// kubernetes entry, what the chart's ClusterRole grants.
func TestHelmChartDefaultConfig(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../deploy/helm/provider-health-exporter/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Config map[string]any `json:"config"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	text, err := yaml.Marshal(values.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(text, onlyKubernetes)
	if err != nil {
		t.Fatalf("the chart's default config does not load: %v\n%s", err, text)
	}
	if ks := config.EntriesOf[*Entry](cfg, Name); len(ks) != 1 || ks[0].Kubeconfig != "" || len(cfg.AllEntries()) != 1 {
		t.Errorf("the chart's default config is %+v; want one in-cluster kubernetes entry and nothing that needs a Secret", cfg)
	}
}

// onlyKubernetes reads a file through the kubernetes section alone: an
// entry of another kind there, which would need a Secret, is an error.
var onlyKubernetes = []config.Section{Kind().Section()}

// deployedSections are the sections of the kinds deploy/kubernetes's
// example configuration has an entry of.
var deployedSections = provider.Sections([]provider.Kind{Kind(), gcp.Kind(), kvm.Kind()})

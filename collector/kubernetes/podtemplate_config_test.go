package kubernetes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/egress-proxies/provider_health_exporter/config"
)

func TestDecodePodTemplate(t *testing.T) {
	t.Parallel()
	const ctr = "spec:\n  containers:\n    - name: proxy\n      image: registry.example/proxy:1\n"
	for _, tc := range []struct {
		name, in, err string
	}{
		{"YAML", "apiVersion: v1\nkind: Pod\n" + ctr, ""},
		{"apiVersion and kind may be left out", ctr, ""},
		{"JSON", `{"apiVersion":"v1","kind":"Pod","spec":{"containers":[{"name":"proxy","image":"registry.example/proxy:1"}]}}`, ""},
		{"unknown field", ctr + "      imagePullPolic: Always\n", `strict decoding: line 5: unknown field "spec.containers[0].imagePullPolic"`},
		{"field in the wrong case", "spec:\n  Containers: []\n", `strict decoding: line 2: unknown field "spec.Containers"`},
		{"two unknown fields", ctr + "      bogus: 1\n  alsoBogus: 2\n", `strict decoding: line 5: unknown field "spec.containers[0].bogus"; line 6: unknown field "spec.alsoBogus"`},
		{"duplicate field", ctr + "      name: again\n", `not YAML or JSON: yaml: unmarshal errors:`},
		{"wrong type: a label's value", "metadata:\n  labels: {tier: 1}\n" + ctr, "metadata.labels: a number where a string is expected"},
		{"wrong type: a list", "spec:\n  containers: proxy\n", "spec.containers: a string where a list is expected"},
		{"wrong type: a mapping", "spec: [a]\n", "spec: a list where a mapping is expected"},
		{"quantity that does not parse", ctr + "      resources: {limits: {cpu: 1 core}}\n", "spec.containers[0].resources.limits.cpu: quantities must match"},
		{"kind of another object", "apiVersion: apps/v1\nkind: Deployment\n", `not a Pod: apiVersion "apps/v1", kind "Deployment" (want apiVersion: v1, kind: Pod)`},
		{"kind alone wrong", "kind: Service\n", `not a Pod: apiVersion missing, kind "Service"`},
		{"two documents", "apiVersion: v1\nkind: Pod\n---\napiVersion: v1\nkind: Pod\n", "more than one YAML document: want one Pod"},
		{"empty", "", "empty: want a Pod manifest"},
		{"comments only", "# nothing\n", "empty: want a Pod manifest"},
		{"null", "null\n", "empty: want a Pod manifest"},
		{"a list", "- a\n- b\n", "not a Pod: want a mapping"},
		{"a string", "pod\n", "not a Pod: want a mapping"},
		{"YAML syntax", "spec: [\n", "not YAML or JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod, err := DecodePodTemplate([]byte(tc.in))
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if pod.APIVersion != "v1" || pod.Kind != "Pod" || len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Image != "registry.example/proxy:1" {
					t.Errorf("decoded %+v", pod)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one with %q", err, tc.err)
			}
		})
	}
}

// TestPodTemplateInTheEntrysSettings: an entry's settings (its YAML, from
// which a reload decides whether to keep the checker, and /config) carry
// the template's digest, so that an edited template under the same path is
// a changed entry; the output loads again as the same configuration.
func TestPodTemplateInTheEntrysSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "pod.yaml")
	cfgFile := filepath.Join(dir, "provider_health.yml")
	write := func(path, data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(cfgFile, "kubernetes:\n  - name: prod\n    namespace: egress-proxies\n    pod_template: pod.yaml\n")
	settings := func() (string, *Entry) {
		t.Helper()
		cfg, err := config.Load(cfgFile, []config.Section{Section()})
		if err != nil {
			t.Fatal(err)
		}
		k := cfg.Entries("kubernetes")[0].(*Entry)
		b, err := yaml.Marshal(k)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), k
	}
	write(tmpl, "spec:\n  containers: [{name: proxy, image: registry.example/proxy:1}]\n")
	first, k := settings()
	if k.PodTemplate.Path != tmpl || k.PodTemplate.Pod == nil || k.PodTemplate.Pod.Spec.Containers[0].Image != "registry.example/proxy:1" {
		t.Fatalf("pod_template %+v", k.PodTemplate)
	}
	if want := "pod_template: " + tmpl + " # sha256:" + k.PodTemplate.SHA256() + "\n"; !strings.Contains(first, want) || len(k.PodTemplate.SHA256()) != 64 {
		t.Errorf("settings\n%s\nlack %q", first, want)
	}
	if again, _ := settings(); again != first {
		t.Errorf("the same template gives other settings:\n%s\n%s", first, again)
	}
	write(tmpl, "spec:\n  containers: [{name: proxy, image: registry.example/proxy:2}]\n")
	if edited, _ := settings(); edited == first {
		t.Errorf("an edited template leaves the settings unchanged:\n%s", edited)
	}
	// What /config shows is a configuration that loads.
	write(cfgFile, "kubernetes:\n"+indent(first))
	if _, err := config.Load(cfgFile, []config.Section{Section()}); err != nil {
		t.Errorf("the marshalled entry does not load: %v", err)
	}
	// Without the key nothing is added.
	b, err := yaml.Marshal(&Entry{Name: "plain"})
	if err != nil || strings.Contains(string(b), "pod_template") {
		t.Errorf("an entry without pod_template marshals as %q, %v", b, err)
	}
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if i == 0 {
			lines[i] = "  - " + l
		} else {
			lines[i] = "    " + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestPodTemplateKeyIsAPath: the key takes a file path, nothing else.
func TestPodTemplateKeyIsAPath(t *testing.T) {
	t.Parallel()
	_, err := config.Parse([]byte("kubernetes:\n  - name: prod\n    namespace: egress-proxies\n    pod_template: {spec: {}}\n"), []config.Section{Section()})
	if err == nil || !strings.Contains(err.Error(), `kubernetes[0] "prod": pod_template:`) || !strings.Contains(err.Error(), "cannot unmarshal !!map into a file path") {
		t.Errorf("error %v, want pod_template named and a file path asked for", err)
	}
}

// TestPodTemplateFileBounds: the template is read with the bounded reader
// of every referenced file: not a named pipe, not over its cap.
func TestPodTemplateFileBounds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("metadata: {name: x}\n"+strings.Repeat("# padding\n", 110_000)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPodTemplate(big); err == nil || !strings.Contains(err.Error(), "a pod template may be at most 1 MiB") {
		t.Errorf("a template over the cap: %v", err)
	}
}

// TestExampleTemplate: the example of docs/configuration.md decodes, and
// meets what the restricted Pod Security level asks of a proxy.
func TestExampleTemplate(t *testing.T) {
	t.Parallel()
	pt, err := ReadPodTemplate(filepath.Join("..", "..", "testdata", "files", "pod-template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sc, ctr := pt.Pod.Spec.SecurityContext, pt.Pod.Spec.Containers
	if pt.Pod.GenerateName != "egress-proxy-" || sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil ||
		len(ctr) != 1 || ctr[0].SecurityContext == nil || ctr[0].SecurityContext.AllowPrivilegeEscalation == nil ||
		*ctr[0].SecurityContext.AllowPrivilegeEscalation || ctr[0].SecurityContext.Capabilities == nil {
		t.Errorf("example template %+v", pt.Pod)
	}
}

// shadowLike is a file of /etc/shadow's shape: each line ends in ':', so
// YAML reads the file as a mapping whose keys are its lines.
const shadowLike = "root:$6$saltsalt$Q8n1m3yRk2vZ9.hashhashhashhashhashhashhashhashhash/:19000:0:99999:7:::\n" +
	"daemon:*:19000:0:99999:7:::\n" +
	"proxyops:$6$pepper12$Zk2vZ9hashhashhashhashhashhashhashhashhash.:19001:0:99999:7:::\n"

// TestStrictErrorsDoNotRepeatTheFile: a pod_template or configuration
// file that is a shadow-like file is refused with the line of each key and
// never its text; a misspelt field is still named in full.
func TestStrictErrorsDoNotRepeatTheFile(t *testing.T) {
	_, err := DecodePodTemplate([]byte(shadowLike))
	if err == nil {
		t.Fatal("a shadow-like file decodes as a Pod")
	}
	msg := err.Error()
	for _, want := range []string{"line 1: unknown field at the top level: (a key of ", "line 3: unknown field", "cannot be a field name, not shown"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	for _, leak := range []string{"$6$", "root", "daemon", "19000", "hash"} {
		if strings.Contains(msg, leak) {
			t.Errorf("error repeats the file (%q): %s", leak, msg)
		}
	}
	// Nested: under a real field, a key that cannot be a field name.
	_, err = DecodePodTemplate([]byte("spec:\n  containers:\n    - name: p\n      image: i\n      \"pass: w$rd\": 1\n"))
	if err == nil || !strings.Contains(err.Error(), `line 5: unknown field under "spec.containers[0]": (a key of 10 bytes`) || strings.Contains(err.Error(), "w$rd") {
		t.Errorf("nested key: %v", err)
	}
	// A duplicate key the YAML parser finds is not repeated either.
	_, err = DecodePodTemplate([]byte("root:$6$x:1:\nroot:$6$x:1:\n"))
	if err == nil || strings.Contains(err.Error(), "$6$") {
		t.Errorf("duplicate key: %v", err)
	}

	dir := t.TempDir()
	shadow := filepath.Join(dir, "shadow")
	if err := os.WriteFile(shadow, []byte(shadowLike), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = config.Load(shadow, []config.Section{Section()})
	if err == nil || !strings.Contains(err.Error(), "line 1: unknown field (a key of ") || strings.Contains(err.Error(), "$6$") {
		t.Errorf("a shadow-like configuration file: %v", err)
	}
}

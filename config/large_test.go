package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// tiny decodes every file list by list, a few items at a time, so that
// small files take every path a 16 MiB one does.
var tiny = config.NewChunking(0, 120)

// fleetText is a file with what cutting must get right: comments and
// blank lines between items, a compact list, quoted and multi-line
// values, lists inside the items cut, entries larger than a batch and
// smaller ones, and a section after the cut ones.
func fleetText(hosts int) string {
	var b strings.Builder
	b.WriteString("# a fleet\ndefaults:\n  timeout: 20s\nkvm:\n")
	b.WriteString("  - name: small\n    user: ops\n    private_key_file: files/placeholder\n    insecure_ignore_host_key: true\n    hosts: [{address: 192.0.2.1}]\n")
	b.WriteString("  - name: fleet\n    user: proxyops # the fleet's user\n    private_key_file: files/placeholder\n    insecure_ignore_host_key: true\n    min_free_memory: 1GiB\n    hosts:\n")
	for i := range hosts {
		fmt.Fprintf(&b, "      - address: 10.0.%d.%d:22\n        name: \"host-%d\"\n", i/250, i%250+1, i)
		switch i % 7 {
		case 1:
			b.WriteString("\n        # a comment\n        pool: fast\n")
		case 3:
			b.WriteString("        volume: >-\n          base\n          image\n")
		case 5:
			b.WriteString("        user: 'other'\n        min_pool_available: 20GiB\n")
		}
	}
	b.WriteString("    volume: base.qcow2\n  - name: compact\n    user: ops\n    private_key_file: files/placeholder\n    insecure_ignore_host_key: true\n    hosts:\n    - address: 192.0.2.7\n    - address: 192.0.2.8\n      name: eight\n")
	b.WriteString("gcp:\n- name: crawl\n  project: crawl-123\n  credentials_file: files/placeholder\n  regions:\n  - us-central1\n  - europe-west4\n  min_quota_headroom:\n    CPUS: 8\n")
	return b.String()
}

// assertSame parses data whole and list by list as ch says, and checks
// that both give the same configuration or the same error.
func assertSame(t *testing.T, name string, data []byte, ch config.Chunking) {
	t.Helper()
	dir := filepath.Join("..", "testdata")
	whole, werr := config.ParseWith(data, dir, sections, config.NewChunking(len(data)+1, 0))
	cut, cerr := config.ParseWith(data, dir, sections, ch)
	// The errors of one file are the same, maybe in another order (a
	// list's after its entry's), and maybe more: yaml stops decoding an
	// entry at its first duplicate key, a piece of it goes on.
	if (werr == nil) != (cerr == nil) || !subset(werr, cerr) {
		t.Fatalf("%s: whole: %v; list by list: %v", name, werr, cerr)
	}
	if werr != nil {
		return
	}
	if !reflect.DeepEqual(whole.Defaults, cut.Defaults) || !reflect.DeepEqual(whole.AllEntries(), cut.AllEntries()) {
		t.Fatalf("%s: list by list differs:\nwhole: %s\ncut:   %s", name, dump(t, whole), dump(t, cut))
	}
}

// subset: every message of a is one of b's.
func subset(a, b error) bool {
	if a == nil {
		return true
	}
	msgs := strings.Split(b.Error(), "; ")
	for _, m := range strings.Split(a.Error(), "; ") {
		if !slices.Contains(msgs, m) {
			return false
		}
	}
	return true
}

func dump(t *testing.T, c *config.Config) string {
	t.Helper()
	var b strings.Builder
	for _, e := range c.AllEntries() {
		fmt.Fprintf(&b, "%+v\n", e)
		if k, ok := e.(*kvm.Entry); ok {
			for _, h := range k.Hosts {
				fmt.Fprintf(&b, "  %+v\n", h)
			}
		}
	}
	return b.String()
}

// TestDecodeLargeCuts: a file of everything cutting must get right is
// decoded list by list (not whole after all) into what decoding it whole
// gives, at batches of every size from one item to the whole file.
func TestDecodeLargeCuts(t *testing.T) {
	t.Parallel()
	data := []byte(fleetText(60))
	for _, batch := range []int{1, 50, 120, 400, 1000, len(data)} {
		ch := config.NewChunking(0, batch)
		if fileErr, err := config.DecodeLarge(data, sections, ch); fileErr != nil || err != nil {
			t.Fatalf("batch %d: not decoded list by list: %v %v", batch, fileErr, err)
		}
		assertSame(t, fmt.Sprintf("batch %d", batch), data, ch)
	}
	cfg, err := config.ParseWith(data, filepath.Join("..", "testdata"), sections, tiny)
	if err != nil {
		t.Fatal(err)
	}
	fleet := config.EntriesOf[*kvm.Entry](cfg, "kvm")[1]
	if h := fleet.Hosts[3]; len(fleet.Hosts) != 60 || h.Volume != "base image" || h.Name != "host-3" || fleet.Hosts[5].User != "other" {
		t.Errorf("fleet: %d hosts, hosts[3] %+v, hosts[5] %+v", len(fleet.Hosts), h, fleet.Hosts[5])
	}
}

// TestDecodeLargeFallsBack: where the text's indentation is not its
// structure, or a piece would lack what another holds, the file is
// decoded whole, with the same result or the same error.
func TestDecodeLargeFallsBack(t *testing.T) {
	t.Parallel()
	head := "kvm:\n  - name: fleet\n    user: ops\n    private_key_file: files/placeholder\n    insecure_ignore_host_key: true\n    hosts:\n"
	for name, text := range map[string]string{
		// An item line inside a quoted scalar: a cut there leaves the
		// quote open.
		"quoted dash": head + "      - address: 192.0.2.1\n        name: \"one\n      - two\"\n      - address: 192.0.2.2\n",
		// A flow list over several lines.
		"flow list": head + "      - address: 192.0.2.1\n        pool: [a,\n      - b]\n      - address: 192.0.2.2\n",
		// An alias of an anchor in another piece.
		"alias": head + "      - &h\n        address: 192.0.2.1\n        name: one\n      - address: 192.0.2.2\n      - *h\n",
		// An anchor outside the list, an alias inside it.
		"anchor outside": "x: &u ops\n" + head + "      - address: 192.0.2.1\n        user: *u\n",
		// A "key:" line that is a quoted scalar's text.
		"key in a scalar": "kvm:\n  - name: fleet\n    user: \"ops\n    hosts:\n      - address: 192.0.2.1\n    \"\n    private_key_file: files/placeholder\n    insecure_ignore_host_key: true\n    hosts:\n      - address: 192.0.2.3\n",
		// The same key twice: an error of the whole file.
		"duplicate key": head + "      - address: 192.0.2.1\n    hosts:\n      - address: 192.0.2.2\n",
		// A syntax error in a piece.
		"syntax": head + "      - address: 192.0.2.1\n        name: : :\n        : x\n",
		// Tabs, CRLF, a second document, a directive.
		"tab":       head + "      - address: 192.0.2.1\n\t\n",
		"crlf":      strings.ReplaceAll(head+"      - address: 192.0.2.1\n", "\n", "\r\n"),
		"documents": head + "      - address: 192.0.2.1\n---\nkvm:\n",
		"directive": "%YAML 1.2\n---\n" + head + "      - address: 192.0.2.1\n",
		// A section that is not a list, and an unknown one.
		"not a list": "kubernetes:\n  name: x\n" + head + "      - address: 192.0.2.1\n",
		"unknown":    "kvms:\n  - name: x\n" + head + "      - address: 192.0.2.1\n",
	} {
		assertSame(t, name, []byte(text), tiny)
	}
}

// TestDecodeLargeErrors: an unknown field or a value of the wrong type,
// in an entry, a host or a defaults section, is reported from the pieces,
// without decoding the file whole (a 16 MiB file's node tree costs more
// than the Deployment's memory limit), with the line, the place and the
// words decoding it whole gives.
func TestDecodeLargeErrors(t *testing.T) {
	t.Parallel()
	head := "kvm:\n  - name: fleet\n    user: ops\n    private_key_file: files/placeholder\n    insecure_ignore_host_key: true\n    hosts:\n"
	hosts := strings.Repeat("      - address: 192.0.2.1\n        name: a\n", 3)
	for name, c := range map[string]struct{ text, want string }{
		"unknown host field": {head + hosts + "      - address: 192.0.2.9\n        passwd: x\n" + hosts,
			`line 14: kvm[0] "fleet": hosts[3]: unknown field "passwd"`},
		"host value type": {head + hosts + hosts + "      - address: 192.0.2.9\n        name: [x]\n",
			`line 20: kvm[0] "fleet": hosts[6]: name: cannot unmarshal !!seq into string`},
		"entry value type": {head + hosts + "  - name: second\n    max_concurrent_dials: many\n",
			"line 14: kvm[1] \"second\": max_concurrent_dials: cannot unmarshal !!str `many` into int"},
		// A key after the list is the entry's, not the last host's.
		"key after the list": {head + hosts + "    max_concurrent_dials: many\n",
			"line 13: kvm[0] \"fleet\": max_concurrent_dials: cannot unmarshal !!str `many` into int"},
		"unknown entry field": {"kvm:\n  - name: fleet\n    password: x\n    hosts:\n" + hosts,
			`line 3: kvm[0] "fleet": unknown field "password"`},
		"defaults": {"defaults:\n  timeout: 10 parsecs\n" + head + hosts,
			`line 2: defaults: timeout: "10 parsecs" is not a valid duration (examples: 500ms, 10s, 1m30s)`},
	} {
		fileErr, err := config.DecodeLarge([]byte(c.text), sections, tiny)
		if err != nil || fileErr == nil || fileErr.Error() != c.want {
			t.Errorf("%s: list by list: %v (decoded whole after all: %v); want %s", name, fileErr, err, c.want)
		}
		assertSame(t, name, []byte(c.text), tiny)
	}
}

// TestDecodeLargeTestdata: every file of testdata, valid or not, gives
// the same configuration or error list by list as whole.
func TestDecodeLargeTestdata(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "*.yml"))
	if err != nil || len(files) < 20 {
		t.Fatalf("testdata: %v %v", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		assertSame(t, f, data, tiny)
		assertSame(t, f, data, config.NewChunking(0, 1))
	}
}

// FuzzDecodeLarge: any text decoded list by list, a few items at a time,
// gives the configuration or the errors decoding it whole gives.
func FuzzDecodeLarge(f *testing.F) {
	for _, b := range testdataConfigs(f) {
		f.Add(b, 60)
	}
	f.Add([]byte(fleetText(8)), 120)
	f.Add([]byte(fleetText(3)), 1)
	f.Fuzz(func(t *testing.T, data []byte, batch int) {
		if len(data) > 64<<10 {
			return
		}
		assertSame(t, "fuzz", data, config.NewChunking(0, batch))
		// Refusing what it cannot cut, as for a file over 2 MiB: what it
		// accepts is what decoding the whole file gives, and a file it
		// refuses with a YAML error is refused by decoding it whole too.
		// (The same words and line are TestDecodeLargeRefusesAsWhole's:
		// here yaml's scanner, which reads tokens ahead, may report an
		// error below the piece's first, or a reader error of a byte
		// further on.)
		cut, cerr := config.ParseWith(data, filepath.Join("..", "testdata"), sections, config.NewStrictChunking(0, batch, nil))
		whole, werr := config.ParseWith(data, filepath.Join("..", "testdata"), sections, config.NewChunking(len(data)+1, 0))
		switch {
		case cerr == nil && (werr != nil || !reflect.DeepEqual(whole.AllEntries(), cut.AllEntries()) || !reflect.DeepEqual(whole.Defaults, cut.Defaults)):
			t.Fatalf("accepted list by list, refusing what it cannot cut; whole: %v", werr)
		case cerr != nil && strings.HasPrefix(cerr.Error(), "yaml: ") && werr == nil:
			t.Fatalf("list by list: %v; whole: %v", cerr, werr)
		}
	})
}

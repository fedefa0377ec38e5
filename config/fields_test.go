package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// WalkShared and WalkOwn are exported, as an inline pointer must be for
// yaml (and reflect) to set it.
type WalkShared struct {
	Port int `yaml:"port"`
}

func (WalkShared) SchemaKeywords() map[string]Keywords {
	return map[string]Keywords{"port": {"minimum": 1}}
}

type WalkOwn struct {
	User       string `yaml:"user"`
	WalkShared `yaml:",inline"`
}

func (WalkOwn) SchemaKeywords() map[string]Keywords {
	return map[string]Keywords{"user": {"minLength": 1}}
}

type walkHost struct {
	Address  string `yaml:"address"`
	*WalkOwn `yaml:",inline"`
	Skipped  string `yaml:"-"`
	Untagged string
	hidden   string //nolint:unused // the walk must leave it out
}

// SchemaKeywords of its own, as kvm.Host has: the one WalkOwn's pointer
// would promote cannot be called on a zero walkHost.
func (walkHost) SchemaKeywords() map[string]Keywords {
	return map[string]Keywords{"address": {"minLength": 2}}
}

// TestYAMLKeysOneWalk: the strict decode, the piecewise decode and the
// schema read a struct's keys from the one walk, an inline pointer to a
// struct (holding an inline struct of its own) included, and agree.
func TestYAMLKeysOneWalk(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[walkHost]()
	keys, inline := yamlKeys(typ)
	var names []string
	for _, k := range keys {
		names = append(names, k.name)
	}
	if want := []string{"address", "user", "port", "untagged"}; !slices.Equal(names, want) {
		t.Errorf("keys %q, want %q", names, want)
	}
	if want := []reflect.Type{reflect.TypeFor[WalkShared](), reflect.TypeFor[WalkOwn]()}; !slices.Equal(inline, want) {
		t.Errorf("inline types %v, want %v", inline, want)
	}

	var h walkHost
	if _, ok := fieldByKey(reflect.ValueOf(&h).Elem(), "address"); !ok || h.WalkOwn != nil {
		t.Errorf("address: found %v, inline pointer %v: want found, and no settings allocated for a key outside them", ok, h.WalkOwn)
	}
	if _, ok := fieldByKey(reflect.ValueOf(&h).Elem(), "nothing"); ok || h.WalkOwn != nil {
		t.Errorf("an unknown key: found %v, inline pointer %v", ok, h.WalkOwn)
	}
	f, ok := fieldByKey(reflect.ValueOf(&h).Elem(), "port")
	if !ok || h.WalkOwn == nil {
		t.Fatalf("port: found %v, inline pointer %v: want both", ok, h.WalkOwn)
	}
	f.SetInt(22)
	if h.Port != 22 {
		t.Errorf("port set through fieldByKey: %d", h.Port)
	}

	var n yaml.Node
	if err := yaml.Unmarshal([]byte("address: a\nuser: u\nport: 22\nuntagged: x\nskipped: y\nhidden: z\n"), &n); err != nil {
		t.Fatal(err)
	}
	errs := unknownKeys(n.Content[0], typ, "host")
	if got := strings.Join(errs, "\n"); got != "line 5: host: unknown field \"skipped\"\nline 6: host: unknown field \"hidden\"" {
		t.Errorf("unknown keys:\n%s", got)
	}

	s, err := structSchema(typ)
	if err != nil {
		t.Fatal(err)
	}
	props := s["properties"].(map[string]any)
	if got := slices.Sorted(func(yield func(string) bool) {
		for k := range props {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(got, []string{"address", "port", "untagged", "user"}) {
		t.Errorf("schema keys %q", got)
	}
	if props["port"].(Keywords)["minimum"] != 1 || props["user"].(Keywords)["minLength"] != 1 || props["address"].(Keywords)["minLength"] != 2 {
		t.Errorf("keywords lost: port %v, user %v, address %v", props["port"], props["user"], props["address"])
	}
}

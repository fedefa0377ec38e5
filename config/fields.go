package config

import (
	"reflect"
	"slices"
	"strings"
)

// yamlKey is one key of a struct as yaml reads it.
type yamlKey struct {
	name string
	typ  reflect.Type
	// index is the path of field indexes from the struct to the key's
	// field, through the inline fields that hold it.
	index []int
}

// yamlKeys is the one walk over a struct's yaml tags, which the strict
// decode (unknownKeys), the piecewise decode of a large file (fieldByKey)
// and the JSON Schema (addFields) all read, so that they cannot disagree
// on what a key is. It lists the keys of struct type t in field order: a
// field's tag name, or its lowercased name, and the keys of an inline
// struct as t's own, an inline pointer to a struct's too (a kvm host's own
// settings, set only when one of its keys is given). inline lists the
// struct types of the inline fields, each after the keys it holds.
func yamlKeys(t reflect.Type) (keys []yamlKey, inline []reflect.Type) {
	walkYAML(t, nil, &keys, &inline)
	return keys, inline
}

func walkYAML(t reflect.Type, at []int, keys *[]yamlKey, inline *[]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		index := slices.Concat(at, []int{i})
		if strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			walkYAML(ft, index, keys, inline)
			*inline = append(*inline, ft)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		*keys = append(*keys, yamlKey{name: name, typ: f.Type, index: index})
	}
}

// yamlFields maps the keys of struct type t to their field types
// (yamlKeys).
func yamlFields(t reflect.Type) map[string]reflect.Type {
	keys, _ := yamlKeys(t)
	out := make(map[string]reflect.Type, len(keys))
	for _, k := range keys {
		out[k.name] = k.typ
	}
	return out
}

// fieldByKey is the field of struct v that the key names (yamlKeys). An
// inline pointer on the way is allocated, only for a key it holds.
func fieldByKey(v reflect.Value, key string) (reflect.Value, bool) {
	keys, _ := yamlKeys(v.Type())
	for _, k := range keys {
		if k.name != key {
			continue
		}
		for _, i := range k.index[:len(k.index)-1] {
			v = v.Field(i)
			for v.Kind() == reflect.Pointer {
				if v.IsNil() {
					v.Set(reflect.New(v.Type().Elem()))
				}
				v = v.Elem()
			}
		}
		return v.Field(k.index[len(k.index)-1]), true
	}
	return reflect.Value{}, false
}

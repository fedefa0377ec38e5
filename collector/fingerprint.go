package collector

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"reflect"
	"strconv"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// fingerprint identifies an entry's settings: a digest of its value, so
// that what the engine keeps per entry is 64 bytes, not a copy of the
// entry. It is computed at every load for every entry, and a large entry
// (a KVM entry of 100,000 hosts) is most of a 16 MiB file: its slices are
// hashed element by element, so no encoding of the whole entry is built,
// and with encoding/json, several times cheaper than re-marshalling YAML
// (docs/scaling.md: "Large configurations").
func fingerprint(entry config.Entry) string {
	h := sha256.New()
	if err := hashValue(h, reflect.ValueOf(entry)); err != nil {
		// Every value of a loaded configuration encodes; one that does
		// not gets a fingerprint of its own, so it is rebuilt at reload.
		return fmt.Sprintf("unhashable-%p", entry)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// hashValue writes v to h: a struct field by field with each field's name,
// a slice element by element with its length, anything else as its JSON.
func hashValue(h hash.Hash, v reflect.Value) error {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			_, _ = h.Write([]byte("null;"))
			return nil
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			_, _ = h.Write([]byte(f.Name + ":"))
			if err := hashValue(h, v.Field(i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		_, _ = h.Write([]byte("[" + strconv.Itoa(v.Len()) + "]"))
		for i := range v.Len() {
			if err := hashValue(h, v.Index(i)); err != nil {
				return err
			}
		}
		return nil
	}
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return fmt.Errorf("fingerprint: %w", err)
	}
	_, _ = h.Write(b)
	_, _ = h.Write([]byte{';'})
	return nil
}

package engine

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
	h := &hasher{Hash: sha256.New()}
	if err := h.value(reflect.ValueOf(entry)); err != nil {
		// Every value of a loaded configuration encodes; one that does
		// not gets a fingerprint of its own, so it is rebuilt at reload.
		return fmt.Sprintf("unhashable-%p", entry)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// hasher writes values to a hash through one scratch buffer: a KVM entry
// of 100,000 hosts is a million fields, and a conversion or a JSON
// encoding of each made a seventh of a reload's garbage.
type hasher struct {
	hash.Hash
	buf []byte
}

func (h *hasher) write(b []byte) { _, _ = h.Write(b) }

// value writes v: a struct field by field with each field's name, a slice
// element by element with its length, a string, a number or a boolean as
// its Go literal, anything else as its JSON.
func (h *hasher) value(v reflect.Value) error {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			h.write([]byte("null;"))
			return nil
		}
		v = v.Elem()
	}
	b := h.buf[:0]
	switch v.Kind() {
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			h.buf = append(append(h.buf[:0], f.Name...), ':')
			h.write(h.buf)
			if err := h.value(v.Field(i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		h.buf = append(strconv.AppendInt(append(h.buf[:0], '['), int64(v.Len()), 10), ']')
		h.write(h.buf)
		for i := range v.Len() {
			if err := h.value(v.Index(i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.String:
		b = strconv.AppendQuote(b, v.String())
	case reflect.Bool:
		b = strconv.AppendBool(b, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b = strconv.AppendInt(b, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		b = strconv.AppendUint(b, v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		b = strconv.AppendFloat(b, v.Float(), 'g', -1, 64)
	default:
		j, err := json.Marshal(v.Interface())
		if err != nil {
			return fmt.Errorf("fingerprint: %w", err)
		}
		b = append(b, j...)
	}
	b = append(b, ';')
	h.buf = b
	h.write(b)
	return nil
}

package provider

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// FuzzLimitedBody: however a body arrives (any content, any length around
// the limit, in pieces of any size), the reader hands out at most the limit
// and says the body is too large exactly when it is longer.
func FuzzLimitedBody(f *testing.F) {
	f.Add([]byte("{}"), uint16(16), true)
	f.Add(bytes.Repeat([]byte("x"), 64), uint16(64), false)
	f.Add(bytes.Repeat([]byte("x"), 65), uint16(64), true)
	f.Add([]byte{}, uint16(0), false)
	f.Fuzz(func(t *testing.T, data []byte, limit uint16, oneByte bool) {
		var r io.Reader = bytes.NewReader(data)
		if oneByte {
			r = iotest.OneByteReader(r)
		}
		b := &limitedBody{rc: io.NopCloser(r), left: int64(limit), limit: int64(limit)}
		got, err := io.ReadAll(b)
		var tooLarge *BodyTooLargeError
		switch {
		case len(data) > int(limit):
			if !errors.As(err, &tooLarge) || tooLarge.Limit != int64(limit) {
				t.Fatalf("%d bytes over a limit of %d: err %v, want BodyTooLargeError", len(data), limit, err)
			}
			if len(got) > int(limit) {
				t.Fatalf("handed out %d bytes, over the limit of %d", len(got), limit)
			}
		case err != nil:
			t.Fatalf("%d bytes within a limit of %d: %v", len(data), limit, err)
		case !bytes.Equal(got, data):
			t.Fatalf("body changed: %q, want %q", got, data)
		}
	})
}

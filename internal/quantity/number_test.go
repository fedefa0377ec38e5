package quantity

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCheckJSONNumbers: a quantity written as a bare JSON number, as
// resource.Quantity also reads it ("memory": 1e2147483647), is held to the
// same bound as a string: an exponent beyond 10^±MaxMagnitude, in either
// case and with either sign, and a mantissa of any length are refused
// with a short error, by work bounded by MaxText. Each input is checked to
// be a valid JSON number first, so that none is a case JSON cannot write.
func TestCheckJSONNumbers(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"1e2147483647",
		"1E+2147483647",
		"-1e2147483647",
		"1e-1000000000",
		"0.5e-2147483648",
		"1e99999999999999999999",
		"1e65",
		"1" + strings.Repeat("0", 100_000),
		"0." + strings.Repeat("0", 100_000) + "1",
		"1." + strings.Repeat("0", 100_000),
		"-" + strings.Repeat("9", MaxText),
	} {
		if !json.Valid([]byte(bad)) {
			t.Fatalf("%q is not a JSON number", boundedText(bad))
		}
		err := Check(bad)
		if err == nil {
			t.Errorf("Check(%s) = nil, want an error", boundedText(bad))
			continue
		}
		if len(err.Error()) > 200 {
			t.Errorf("Check(%s): error of %d bytes", boundedText(bad), len(err.Error()))
		}
	}
	for _, ok := range []string{"4", "0", "-1", "0.5", "1e3", "1E-3", "2.5e+9", "9223372036854775807"} {
		if !json.Valid([]byte(ok)) {
			t.Fatalf("%q is not a JSON number", ok)
		}
		if err := Check(ok); err != nil {
			t.Errorf("Check(%s) = %v, want nil", ok, err)
		}
	}
}

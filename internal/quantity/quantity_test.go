package quantity

import (
	"errors"
	"math"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Milli
		err  string
	}{
		{"0", 0, ""},
		{"1", 1000, ""},
		{"500m", 500, ""},
		{"1.5", 1500, ""},
		{"2.5Ki", 2560000, ""},
		{"4Gi", 4 << 30 * 1000, ""},
		{"1k", 1_000_000, ""},
		{"1e3", 1_000_000, ""},
		{"1E3", 1_000_000, ""},
		{"1E", MaxMilli, ""}, // exa: 1e21 thousandths, over int64
		{"1n", 1, ""},        // rounded up to a thousandth, as MilliValue
		{"-1n", -1, ""},      // away from zero
		{"0.0001Ki", 103, ""},
		{"-2", -2000, ""},
		{"+2", 2000, ""},
		{".5", 500, ""},
		{"9223372036854775807", MaxMilli, ""},
		{"100Ei", MaxMilli, ""},
		{"1e64", MaxMilli, ""},
		{"-1e64", -MaxMilli, ""},
		{"1e-64", 1, ""},
		{"0e1000", 0, "magnitude"},
		{"1e1000000000", 0, "magnitude"},
		{"1e-1000000000", 0, "magnitude"},
		{"1e99999999999999999999999999", 0, "magnitude"},
		{"1" + strings.Repeat("0", 100), 0, "magnitude"},
		{"0." + strings.Repeat("0", 100) + "1", 0, "magnitude"},
		{"1." + strings.Repeat("0", 1<<20), 1000, ""},
		{"", 0, "empty"},
		{"Gi", 0, "no digits"},
		{"1K", 0, "unknown suffix"},
		{"1e", 0, "unknown suffix"},
		{"1e3.5", 0, "not a whole number"},
		{"1 ", 0, "unknown suffix"},
	} {
		got, err := Parse(tc.in)
		name := tc.in
		if len(name) > 40 {
			name = name[:40] + "…"
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) = %d, %v; want an error with %q", name, got, err, tc.err)
			}
			if tc.err == "magnitude" && !errors.Is(err, ErrMagnitude) {
				t.Errorf("Parse(%q): %v is not ErrMagnitude", name, err)
			}
			if err != nil && len(err.Error()) > 200 {
				t.Errorf("Parse(%q): error of %d bytes", name, len(err.Error()))
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", name, got, err, tc.want)
		}
	}
}

func TestSub(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ a, b, want Milli }{
		{5000, 2000, 3000},
		{MaxMilli, -MaxMilli, MaxMilli},
		{-MaxMilli, MaxMilli, -MaxMilli},
		{MaxMilli, 1, MaxMilli - 1},
	} {
		if got := tc.a.Sub(tc.b); got != tc.want {
			t.Errorf("%d - %d = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m      Milli
		binary bool
		want   string
	}{
		{1500, false, "1500m"},
		{0, true, "0"},
		{16 << 30 * 1000, true, "16Gi"},
		{3 << 10 * 1000, true, "3Ki"},
		{2000, false, "2"},
		{-1024000, true, "-1Ki"},
	} {
		if got := Format(tc.m, tc.binary); got != tc.want {
			t.Errorf("Format(%d, %v) = %q, want %q", tc.m, tc.binary, got, tc.want)
		}
	}
}

// FuzzParse: Parse returns for any input, its errors are short, and where
// resource.ParseQuantity can be asked without risk (a short input, a small
// exponent) both agree on the value in thousandths.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"1", "500m", "1.5Gi", "1e3", "-2.25k", "1e-1000000000", "0.0001Ki", ".5", "5.", "1E", "+3n", "12345678901234567890"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Parse(s)
		if err != nil && len(err.Error()) > 600 {
			t.Fatalf("error of %d bytes for an input of %d", len(err.Error()), len(s))
		}
		if len(s) > 24 || strings.ContainsAny(s, "eE") && !safeExponent(s) {
			return
		}
		q, kerr := resource.ParseQuantity(s)
		if err == nil && kerr != nil {
			t.Fatalf("Parse(%q) = %d, resource.ParseQuantity refuses it: %v", s, m, kerr)
		}
		// A quantity without digits ("+", "Gi") is 0 to resource.Quantity;
		// an API server never writes one, and Parse refuses it.
		if err != nil && kerr == nil && !errors.Is(err, errNoDigits) && !errors.Is(err, ErrMagnitude) {
			t.Fatalf("Parse(%q): %v; resource.ParseQuantity takes it as %s", s, err, q.String())
		}
		// resource.Quantity rounds negative values inconsistently
		// ("-1e-10" is 1 thousandth, "-0.0001Ki" -101): only the others
		// are compared. A quota's hard and used are never negative.
		if err != nil || strings.HasPrefix(s, "-") || m == MaxMilli || m == -MaxMilli || m > math.MaxInt64/4 || m < -math.MaxInt64/4 {
			return
		}
		if want := q.MilliValue(); int64(m) != want {
			t.Fatalf("Parse(%q) = %d thousandths, resource.Quantity says %d", s, m, want)
		}
	})
}

// safeExponent tells whether the exponent of s, if any, is small enough
// for resource.ParseQuantity to finish.
func safeExponent(s string) bool {
	i := strings.LastIndexAny(s, "eE")
	e := strings.TrimLeft(s[i+1:], "+-")
	return len(e) <= 2
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"4", "500m", "9223372036854775807Ki", "1e64", "1e-64", "0.5Gi", "-1"} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"1e-1000000000", "1e2147483647", "1E9223372036854775807", "1e65", strings.Repeat("9", MaxText+1), "", "Gi", "1x"} {
		if err := Check(bad); err == nil {
			t.Errorf("Check(%q) = nil, want an error", boundedText(bad))
		}
	}
	if err := Check(strings.Repeat("1", MaxText)); err != nil {
		t.Errorf("a %d-digit quantity refused: %v", MaxText, err)
	}
}

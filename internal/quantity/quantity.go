// Package quantity reads Kubernetes quantities ("4Gi", "500m", "1e3") into
// int64 thousandths of their unit with bounded work, for values an API
// server sends and minimums the configuration sets (docs/security.md:
// "Strings, labels and pages").
//
// k8s.io/apimachinery's resource.Quantity is exact, and so unbounded: a
// quantity of "1e-1000000000" never finishes parsing, and "1e1000000000"
// parses in microseconds but hard − used on it never finishes. A cluster
// holds nothing a quantity of 2^63−1 thousandths cannot say, so values are
// clamped to that; a magnitude beyond 10^±MaxMagnitude is an error, since
// no cluster could mean it.
package quantity

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// MaxMagnitude bounds the power of ten of a quantity's leading digit, in
// its unit: beyond 10^64 or below 10^−64 the value is an error.
const MaxMagnitude = 64

// Milli is a quantity in thousandths of its unit ("1500m" of CPU is 1500,
// "2" pods are 2000), clamped to ±math.MaxInt64.
type Milli int64

// MaxMilli is the largest value: anything larger is clamped to it.
const MaxMilli Milli = math.MaxInt64

// Float is the value in its unit, for a metric.
func (m Milli) Float() float64 { return float64(m) / 1000 }

// Sub is m − o, clamped instead of overflowing.
func (m Milli) Sub(o Milli) Milli {
	d := int64(m) - int64(o)
	switch {
	case o < 0 && d < int64(m):
		return MaxMilli
	case o > 0 && d > int64(m):
		return -MaxMilli
	}
	return Milli(d)
}

// ErrMagnitude is a quantity whose magnitude is beyond 10^±MaxMagnitude.
var ErrMagnitude = fmt.Errorf("magnitude beyond 10^±%d, which no cluster could mean", MaxMagnitude)

// errNoDigits is a quantity without a number ("Gi", "+"), which
// resource.ParseQuantity reads as 0 and an API server never writes.
var errNoDigits = errors.New("no digits")

// binarySI and decimalSI are the suffixes of the quantity syntax: powers
// of two and of ten.
var (
	binarySI  = map[string]int{"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
	decimalSI = map[string]int{"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
)

// keptDigits is how many significant digits the arithmetic keeps; the rest
// only decide the rounding. Beyond 19 digits nothing fits int64 anyway.
const keptDigits = 40

// Parse reads s in the syntax of resource.ParseQuantity: an optional sign,
// digits with an optional decimal point, and a suffix (a binary unit
// Ki…Ei, a decimal unit n u m k M G T P E, or an exponent e3/E-3). The
// value is rounded up, away from zero, to a thousandth, as
// Quantity.MilliValue rounds, and clamped to ±MaxMilli. Its work is linear
// in len(s) whatever the exponent.
func Parse(s string) (Milli, error) {
	if s == "" {
		return 0, errors.New("empty quantity")
	}
	neg, intDigits, fracDigits, suffix, err := split(s)
	if err != nil {
		return 0, fmt.Errorf("quantity %q: %w", boundedText(s), err)
	}
	exp10, exp2, err := interpret(suffix)
	if err != nil {
		return 0, fmt.Errorf("quantity %q: %w", boundedText(s), err)
	}
	m, err := milli(intDigits, fracDigits, exp10, exp2)
	if err != nil {
		return 0, fmt.Errorf("quantity %q: %w", boundedText(s), err)
	}
	if neg {
		m = -m
	}
	return m, nil
}

// split cuts s into its sign, the digits before and after the decimal
// point, and the suffix, as resource.ParseQuantity does.
func split(s string) (neg bool, intDigits, fracDigits, suffix string, err error) {
	pos := 0
	switch s[0] {
	case '-':
		neg = true
		pos++
	case '+':
		pos++
	}
	start := pos
	for pos < len(s) && isDigit(s[pos]) {
		pos++
	}
	intDigits = s[start:pos]
	if pos < len(s) && s[pos] == '.' {
		pos++
		start = pos
		for pos < len(s) && isDigit(s[pos]) {
			pos++
		}
		fracDigits = s[start:pos]
	}
	if intDigits == "" && fracDigits == "" {
		return false, "", "", "", errNoDigits
	}
	suffix = s[pos:]
	return neg, intDigits, fracDigits, suffix, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// interpret gives a suffix's power of ten and of two.
func interpret(suffix string) (exp10, exp2 int, err error) {
	if e, ok := binarySI[suffix]; ok {
		return 0, e, nil
	}
	if e, ok := decimalSI[suffix]; ok {
		return e, 0, nil
	}
	if len(suffix) > 1 && (suffix[0] == 'e' || suffix[0] == 'E') {
		e, err := exponent(suffix[1:])
		if err != nil {
			return 0, 0, err
		}
		return e, 0, nil
	}
	return 0, 0, fmt.Errorf("unknown suffix %q (want Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent like e3)", boundedText(suffix))
}

// exponent reads a signed decimal exponent; one beyond what MaxMagnitude
// allows is ErrMagnitude without reading it as a number.
func exponent(s string) (int, error) {
	neg := false
	switch {
	case s == "":
		return 0, errors.New("exponent without digits")
	case s[0] == '-':
		neg, s = true, s[1:]
	case s[0] == '+':
		s = s[1:]
	}
	if s == "" {
		return 0, errors.New("exponent without digits")
	}
	for i := range len(s) {
		if !isDigit(s[i]) {
			return 0, fmt.Errorf("exponent %q is not a whole number", boundedText(s))
		}
	}
	s = strings.TrimLeft(s, "0")
	if len(s) > 6 {
		return 0, ErrMagnitude
	}
	e := 0
	if s != "" {
		e, _ = strconv.Atoi(s) // six digits at most
	}
	if neg {
		e = -e
	}
	return e, nil
}

// milli is the value of the digits times 10^exp10 × 2^exp2, in
// thousandths, rounded up and clamped.
func milli(intDigits, fracDigits string, exp10, exp2 int) (Milli, error) {
	digits := strings.TrimLeft(intDigits+fracDigits, "0")
	// The value is 0.digits × 10^mag of the unit.
	mag := len(strings.TrimLeft(intDigits, "0")) + exp10
	if strings.TrimLeft(intDigits, "0") == "" {
		// Only the fraction: its leading zeros lower the magnitude.
		mag = exp10 - (len(fracDigits) - len(strings.TrimLeft(fracDigits, "0")))
	}
	if exp10 > MaxMagnitude || exp10 < -MaxMagnitude {
		return 0, ErrMagnitude
	}
	digits = strings.TrimRight(digits, "0")
	if digits == "" {
		return 0, nil
	}
	if mag-1 > MaxMagnitude || mag-1 < -MaxMagnitude {
		return 0, ErrMagnitude
	}
	// In thousandths: 0.digits × 10^(mag+3) × 2^exp2. 10^19 thousandths
	// is over MaxMilli even before the binary unit, which only raises it.
	e := mag + 3 - len(digits) // the value is digits × 10^e × 2^exp2
	if mag+3-1 >= 19 {
		return MaxMilli, nil
	}
	sticky := false // a non-zero digit was dropped: round up
	if len(digits) > keptDigits {
		e += len(digits) - keptDigits
		digits, sticky = digits[:keptDigits], true
	}
	n, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		return 0, fmt.Errorf("digits %q", boundedText(digits))
	}
	n.Lsh(n, uint(exp2))
	ten := big.NewInt(10)
	if e > 0 {
		n.Mul(n, new(big.Int).Exp(ten, big.NewInt(int64(e)), nil))
	} else if e < 0 {
		q, r := new(big.Int).QuoRem(n, new(big.Int).Exp(ten, big.NewInt(int64(-e)), nil), new(big.Int))
		if r.Sign() != 0 {
			sticky = true
		}
		n = q
	}
	if sticky {
		n.Add(n, big.NewInt(1))
	}
	if !n.IsInt64() {
		return MaxMilli, nil
	}
	return Milli(n.Int64()), nil
}

// boundedText keeps an error message short whatever was sent.
func boundedText(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// Format writes m for a message: whole units as a plain number, or with
// the largest binary unit that divides them when binary is set ("16Gi"),
// else thousandths ("1500m").
func Format(m Milli, binary bool) string {
	if m%1000 != 0 {
		return strconv.FormatInt(int64(m), 10) + "m"
	}
	units := int64(m) / 1000
	if binary && units != 0 {
		for _, u := range []struct {
			suffix string
			shift  uint
		}{{"Ei", 60}, {"Pi", 50}, {"Ti", 40}, {"Gi", 30}, {"Mi", 20}, {"Ki", 10}} {
			if units%(1<<u.shift) == 0 {
				return strconv.FormatInt(units>>u.shift, 10) + u.suffix
			}
		}
	}
	return strconv.FormatInt(units, 10)
}

// Binary tells whether s is written with a binary unit ("4Gi").
func Binary(s string) bool {
	return len(s) >= 2 && binarySI[s[len(s)-2:]] != 0
}

package quantity

import "fmt"

// MaxText bounds the text of a quantity read from an API server. The
// longest a cluster writes is a canonical int64 with a suffix ("9223372036854775807Ki",
// 21 characters); resource.ParseQuantity's work on a longer one grows with
// its digits, so a text longer than this is refused before it is parsed.
const MaxText = 64

// Check refuses a quantity that resource.ParseQuantity must not be given:
// a text longer than MaxText, a magnitude beyond 10^±MaxMagnitude (where
// "1e-1000000000" would keep ParseQuantity busy for minutes, and
// "1e2147483647" reads as 0), or any text Parse does not read. Its work is
// bounded by MaxText whatever s is.
func Check(s string) error {
	if len(s) > MaxText {
		return fmt.Errorf("quantity %q: %d characters, longer than the %d any cluster writes", boundedText(s), len(s), MaxText)
	}
	_, err := Parse(s)
	return err
}

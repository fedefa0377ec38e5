package config

import (
	"regexp"
	"strconv"
)

// fieldNameRE is what a field name of the configuration or of a Pod can be:
// letters, digits, '_' and '-', starting with a letter or '_'. A key of any
// other shape is no misspelt field: it is the sign of a file that is not
// what the configuration says (a pod_template pointing at /etc/shadow
// parses as a mapping whose keys are its lines).
var fieldNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

// FieldName tells whether key has the shape of a field name (fieldNameRE).
func FieldName(key string) bool { return fieldNameRE.MatchString(key) }

// QuoteKey is key as an error message shows it: quoted when it could be a
// misspelt field name, otherwise only its length. An error message goes to
// the log, to --config.check's output and to the body of a failed
// /-/reload: what is in a file that is not the configuration's must not
// (docs/security.md: "What the exporter bounds").
func QuoteKey(key string) string {
	if FieldName(key) {
		return strconv.Quote(key)
	}
	return "(a key of " + strconv.Itoa(len(key)) + " bytes that cannot be a field name, not shown: is this the right file?)"
}

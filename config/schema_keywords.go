package config

// What the JSON Schema of the file (Schema) says of each key beyond its Go
// type: the checks of Load a schema can express, so an editor or `helm
// lint` shows them where the file is written. Load stays the judge: a
// pattern here admits at least every value Load takes.

// durationPattern is a duration as Prometheus writes them (model.Duration):
// units from y to ms, largest first, or "0".
const durationPattern = `^(0|([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?)$`

// JSONSchema implements JSONSchemaer: a Duration is a string ("10s"); a
// YAML 0 reads as "0".
func (Duration) JSONSchema() Keywords {
	return Keywords{
		"type":      []string{"string", "integer"},
		"pattern":   durationPattern,
		"minLength": 1,
		"minimum":   0,
		"maximum":   0,
	}
}

// positive makes a duration's schema refuse zero ("0", "0s", "0m0s").
func positive(k Keywords) {
	k["type"] = "string"
	delete(k, "minimum")
	delete(k, "maximum")
	k["not"] = Keywords{"pattern": `^[0ywdhms]*$`}
}

// PositiveDuration is the schema of a duration that must not be zero.
func PositiveDuration(desc string) Keywords {
	k := Duration(0).JSONSchema()
	positive(k)
	k["minimum"], k["maximum"] = nil, nil // deleted where merged
	k["description"] = desc
	return k
}

// SchemaKeywords implements SchemaKeywordser.
func (Defaults) SchemaKeywords() map[string]Keywords {
	return map[string]Keywords{
		"timeout":      PositiveDuration("Timeout of every check that sets none (default 10s)."),
		"min_interval": {"description": "Least time between two checks of an entry that sets none (default 0: every scrape checks)."},
	}
}

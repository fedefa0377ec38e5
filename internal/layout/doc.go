// Package layout has no code: its test holds the direction of the imports
// between the exporter's packages (docs/development.md: "Layout").
package layout

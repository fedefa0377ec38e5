package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds the loader arbitrary bytes, seeded with every config
// under testdata: no input may panic or hang it.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "*.yml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			if err.Error() == "" {
				t.Error("empty error message")
			}
			return
		}
		// A valid config must describe itself without panicking.
		_ = cfg.Summary()
	})
}

package config

// RenderChunk is renderChunk for the tests of package config_test, which
// read files through the kinds' sections (their packages import this one).
const RenderChunk = renderChunk

// Chunking is how a large file is cut, for the tests of package config_test.
type Chunking = chunking

// NewChunking cuts files of from bytes or more into batches of batch
// bytes of items, and decodes whole any file that cannot be cut.
func NewChunking(from, batch int) Chunking { return chunking{from: from, batch: batch, whole: 1 << 62} }

// NewStrictChunking is NewChunking refusing every file that cannot be
// cut, as the exporter refuses a large one; cut, if not nil, is told of
// each list cut.
func NewStrictChunking(from, batch int, cut func(key string, line int)) Chunking {
	return chunking{from: from, batch: batch, cut: cut}
}

// LargeFiles is the exporter's chunking.
var LargeFiles = largeFiles

// ParseWith is parseWith for package config_test.
func ParseWith(data []byte, dir string, sections []Section, ch Chunking) (*Config, error) {
	return parseWith(data, dir, sections, ch)
}

// DecodeLarge is decodeLarge of an empty Config, for package config_test.
func DecodeLarge(data []byte, sections []Section, ch Chunking) (fileErr, err error) {
	return (&Config{}).decodeLarge(data, sections, ch)
}

package config

// RenderChunk is renderChunk for the tests of package config_test, which
// read files through the kinds' sections (their packages import this one).
const RenderChunk = renderChunk

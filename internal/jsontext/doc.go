// Package jsontext scans and decodes JSON string literals.
//
// Three hand-written JSON readers need strings: the front door's request
// scanner (one long prompt string per request, on every request's path),
// the tokenizer's tokenizer.json reader (150,000 short vocabulary strings
// at start-up) and the chat template's value decoder (message contents).
// Each once carried its own copy of the escape rules; this package is the
// one copy, checked against encoding/json by its fuzz target.
//
// Scan finds a literal's end and checks its syntax, eight bytes at a time
// while no quote, backslash or control character is in sight, so a
// 40 KB prompt costs a few microseconds. AppendUnescaped decodes escapes
// and leaves every other byte alone, for callers with their own policy on
// invalid UTF-8 (the tokenizer follows HuggingFace's); String decodes
// exactly as encoding/json does, invalid UTF-8 bytes and lone surrogates
// becoming U+FFFD.
//
// The package does no I/O and keeps no state; nothing it returns aliases its
// input unless a function says so.
package jsontext

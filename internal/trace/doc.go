// Package trace reads Mooncake request traces (JSON lines of timestamp in
// ms, input_length, output_length and hash_ids of 512-token blocks), plain or
// gzipped, and expands hash ids into deterministic token ids so that equal
// ids give equal tokens and different ids different tokens.
//
// Two real traces from the Mooncake project are embedded (see PROVENANCE.md)
// so benchmarks and the simulator work with nothing outside the binary.
//
// The package is pure apart from reading the io.Reader it is given.
package trace

//go:build !amd64 || purego

package kvhash

// accumulate folds stripes 64-byte stripes of b into acc (see
// accumulateGeneric).
func accumulate(acc *[8]uint64, b []byte, key []uint64, stripes int) {
	accumulateGeneric(acc, b, key, stripes)
}

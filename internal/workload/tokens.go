package workload

import "github.com/kvrouter/kvrouter/internal/trace"

// Stream kinds keep the token streams of different roles apart.
const (
	kindPrefix uint64 = iota + 1
	kindUser
	kindSystem
	kindQuestion
	kindSession
)

// streamID derives a token stream id from a seed and a role. The result
// is mixed so ids never fall into the small integers Mooncake hash ids use.
func streamID(seed, kind, a, b uint64) uint64 {
	x := seed ^ 0x6a09e667f3bcc908
	for _, v := range [...]uint64{kind, a, b} {
		x ^= v + 0x9e3779b97f4a7c15 + (x << 6) + (x >> 2)
		x = mix64(x)
	}
	return x | 1<<63
}

// mix64 is the splitmix64 finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// appendStream appends tokens [from, from+n) of stream id to dst.
func appendStream(dst []uint32, id uint64, from, n int) []uint32 {
	for j := from; j < from+n; j++ {
		dst = append(dst, trace.BlockToken(id, j))
	}
	return dst
}

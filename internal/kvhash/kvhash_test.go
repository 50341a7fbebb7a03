package kvhash

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
	"pgregory.net/rapid"
)

func TestPinnedVector(t *testing.T) {
	if got := xxh3.HashSeed([]byte("test data"), Seed); got != 13226331709069118873 {
		t.Fatalf("library XXH3-64(\"test data\", 1337) = %d, want 13226331709069118873", got)
	}
	if got := defaultKeys.hash([]byte("test data")); got != 13226331709069118873 {
		t.Fatalf("XXH3-64(\"test data\", 1337) = %d, want 13226331709069118873", got)
	}
	// Values cross-checked against two other XXH3 implementations when the
	// hash library was chosen, and the published empty-input value.
	if got := LocalHash([]uint32{1, 2}, Seed); got != 0x9581a6bbf9cef45a {
		t.Fatalf("LocalHash([1 2], 1337) = %#x, want 0x9581a6bbf9cef45a", got)
	}
	zero := newKeys(0)
	if got := zero.hash(nil); got != 0x2d06800538d394c2 {
		t.Fatalf("XXH3-64(empty, 0) = %#x, want 0x2d06800538d394c2", got)
	}
}

// TestWorkedExample checks the worked example of the Dynamo brief (§1.6),
// computed there with the reference C xxHash.
func TestWorkedExample(t *testing.T) {
	tokens := []uint32{0, 1, 2, 3, 4, 5, 6, 7}
	local, seq, err := Hashes(tokens, Options{BlockSize: 4}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{9143094415614847814, 12124091508212882195}
	if !slices.Equal(local, want) {
		t.Fatalf("local = %v, want %v", local, want)
	}
	if seq[0] != local[0] || seq[1] != 9510318385840434533 {
		t.Fatalf("seq = %v, want [%d 9510318385840434533]", seq, local[0])
	}

	if s := SaltedSeed("adapter-a", ""); s != 8842669519798868182 {
		t.Fatalf("LoRA seed = %d", s)
	}
	local, seq, _ = Hashes(tokens, Options{BlockSize: 4, LoRAName: "adapter-a"}, nil, nil)
	if local[0] != 6665157333201000639 || local[1] != 11721812545976571723 || seq[1] != 13351519314849170528 {
		t.Fatalf("LoRA local %v seq %v", local, seq)
	}
	if s := SaltedSeed("adapter-a", "tenant-a"); s != 10790858310771630931 {
		t.Fatalf("LoRA+namespace seed = %d", s)
	}
	local, _, _ = Hashes(tokens, Options{BlockSize: 4, LoRAName: "adapter-a", Namespace: "tenant-a"}, nil, nil)
	if local[0] != 8269515957840517240 {
		t.Fatalf("LoRA+namespace local[0] = %d", local[0])
	}
	local, _, _ = Hashes(tokens, Options{BlockSize: 4, MM: [][]uint64{{42}}}, nil, nil)
	if local[0] != 18280081842874931122 {
		t.Fatalf("MM local[0] = %d", local[0])
	}
	if local[1] != 12124091508212882195 {
		t.Fatalf("MM must not touch block 1: %d", local[1])
	}
}

// naive recomputes the hashes the slow, obvious way: encode every block into
// a fresh byte slice, hash it, then chain through a fresh 16-byte slice.
func naive(tokens []uint32, bs int, lora, ns string, mm [][]uint64) (local, seq []uint64) {
	seed := uint64(1337)
	if lora != "" {
		seed += xxh3.Hash([]byte(lora))
	}
	if ns != "" {
		seed += xxh3.HashSeed([]byte(ns), 1)
	}
	for start := 0; start+bs <= len(tokens); start += bs {
		var b []byte
		for _, tok := range tokens[start : start+bs] {
			b = append(b, byte(tok), byte(tok>>8), byte(tok>>16), byte(tok>>24))
		}
		i := start / bs
		if i < len(mm) {
			m := append([]uint64(nil), mm[i]...)
			slices.Sort(m)
			for _, h := range m {
				b = binary.LittleEndian.AppendUint64(b, h)
			}
		}
		local = append(local, xxh3.HashSeed(b, seed))
	}
	for i, l := range local {
		if i == 0 {
			seq = append(seq, l)
			continue
		}
		b := binary.LittleEndian.AppendUint64(nil, seq[i-1])
		b = binary.LittleEndian.AppendUint64(b, l)
		seq = append(seq, xxh3.HashSeed(b, 1337))
	}
	return local, seq
}

func TestHashesMatchNaive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tokens := rapid.SliceOfN(rapid.Uint32(), 0, 300).Draw(t, "tokens")
		bs := rapid.IntRange(1, 70).Draw(t, "bs")
		lora := rapid.SampledFrom([]string{"", "a", "adapter-x"}).Draw(t, "lora")
		ns := rapid.SampledFrom([]string{"", "tenant"}).Draw(t, "ns")
		var mm [][]uint64
		if rapid.Bool().Draw(t, "mm") {
			mm = rapid.SliceOfN(rapid.SliceOfN(rapid.Uint64(), 0, 3), 0, 5).Draw(t, "mmhashes")
		}
		wl, ws := naive(tokens, bs, lora, ns, mm)
		gl, gs, err := Hashes(tokens, Options{BlockSize: bs, LoRAName: lora, Namespace: ns, MM: mm}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(gl) != len(tokens)/bs {
			t.Fatalf("%d blocks for %d tokens of %d", len(gl), len(tokens), bs)
		}
		if !slices.Equal(gl, wl) && !(len(gl) == 0 && len(wl) == 0) {
			t.Fatalf("local %v != naive %v", gl, wl)
		}
		if !slices.Equal(gs, ws) && !(len(gs) == 0 && len(ws) == 0) {
			t.Fatalf("seq %v != naive %v", gs, ws)
		}
	})
}

func TestPrefixProperty(t *testing.T) {
	// Equal sequence hashes ⇔ equal prefixes: the chain of a prompt is a
	// prefix of the chain of any extension of it.
	a := make([]uint32, 64)
	for i := range a {
		a[i] = uint32(i * 7)
	}
	b := append(slices.Clone(a), 1, 2, 3, 4, 5, 6, 7, 8)
	_, sa, _ := Hashes(a, Options{BlockSize: 8}, nil, nil)
	_, sb, _ := Hashes(b, Options{BlockSize: 8}, nil, nil)
	if !slices.Equal(sa, sb[:len(sa)]) {
		t.Fatal("extension changed the prefix chain")
	}
	c := slices.Clone(a)
	c[0] = 99
	_, sc, _ := Hashes(c, Options{BlockSize: 8}, nil, nil)
	for i := range sc {
		if sc[i] == sa[i] {
			t.Fatalf("block %d: different first block, same sequence hash", i)
		}
	}
}

func TestBadBlockSize(t *testing.T) {
	if _, _, err := Hashes([]uint32{1, 2}, Options{}, nil, nil); !errors.Is(err, ErrBlockSize) {
		t.Fatalf("err = %v, want ErrBlockSize", err)
	}
}

func TestReuseAllocatesNothing(t *testing.T) {
	tokens := make([]uint32, 16384)
	local, seq, _ := Hashes(tokens, Options{BlockSize: 16}, nil, nil)
	allocs := testing.AllocsPerRun(10, func() {
		local, seq, _ = Hashes(tokens, Options{BlockSize: 16}, local, seq)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per call with reused slices", allocs)
	}
}

func benchHashes(b *testing.B, bs int) {
	tokens := make([]uint32, 16384)
	for i := range tokens {
		tokens[i] = uint32(i) * 2654435761
	}
	var local, seq []uint64
	b.SetBytes(int64(4 * len(tokens)))
	b.ReportAllocs()
	for b.Loop() {
		local, seq, _ = Hashes(tokens, Options{BlockSize: bs}, local, seq)
	}
}

func BenchmarkHashes16k_BS16(b *testing.B) { benchHashes(b, 16) }
func BenchmarkHashes16k_BS64(b *testing.B) { benchHashes(b, 64) }

// TestXXH3MatchesLibrary checks the package's own XXH3-64 against
// github.com/zeebo/xxh3 on random inputs of every length from 0 to 2,100
// bytes (every size class of the specification: 0, 1..3, 4..8, 9..16,
// 17..128, 129..240, and the long path with 0, 1 and 2 full 1,024-byte
// blocks), at every start offset modulo 8, with the default seed, seed 0
// and random seeds.
func TestXXH3MatchesLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 2100+8)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	seeds := []uint64{Seed, 0, 1, rng.Uint64(), rng.Uint64()}
	for _, seed := range seeds {
		k := newKeys(seed)
		for n := 0; n <= 2100; n++ {
			b := buf[n%8 : n%8+n]
			if got, want := k.hash(b), xxh3.HashSeed(b, seed); got != want {
				t.Fatalf("seed %d, %d bytes: %#x, library %#x", seed, n, got, want)
			}
		}
	}
	for range 1000 {
		var b [16]byte
		lo, hi := rng.Uint64(), rng.Uint64()
		binary.LittleEndian.PutUint64(b[:], lo)
		binary.LittleEndian.PutUint64(b[8:], hi)
		if got, want := ChainHash(lo, hi), xxh3.HashSeed(b[:], Seed); got != want {
			t.Fatalf("ChainHash(%#x, %#x) = %#x, library %#x", lo, hi, got, want)
		}
	}
}

// TestLocalHashMatchesLibrary checks LocalHash and Hashes at the block sizes
// routers use (and the neighbours of the size-class boundaries) against the
// library on random tokens, salted and not.
func TestLocalHashMatchesLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, bs := range []int{1, 2, 3, 4, 8, 15, 16, 17, 32, 59, 60, 61, 64, 128, 255, 256, 257, 512} {
		tokens := make([]uint32, 5*bs)
		for i := range tokens {
			tokens[i] = rng.Uint32()
		}
		for _, seed := range []uint64{Seed, SaltedSeed("lora", "ns")} {
			if got, want := LocalHash(tokens[:bs], seed), xxh3.HashSeed(leBytes(tokens[:bs]), seed); got != want {
				t.Fatalf("bs %d seed %d: LocalHash %#x, library %#x", bs, seed, got, want)
			}
		}
		local, seq, _ := Hashes(tokens, Options{BlockSize: bs, LoRAName: "lora", Namespace: "ns"}, nil, nil)
		wl, ws := naive(tokens, bs, "lora", "ns", nil)
		if !slices.Equal(local, wl) || !slices.Equal(seq, ws) {
			t.Fatalf("bs %d salted: Hashes differs from the naive route", bs)
		}
		only, _ := LocalHashes(tokens, Options{BlockSize: bs, LoRAName: "lora", Namespace: "ns"}, nil)
		if !slices.Equal(only, wl) {
			t.Fatalf("bs %d salted: LocalHashes differs from the naive route", bs)
		}
	}
}

func leBytes(tokens []uint32) []byte {
	var b []byte
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	return b
}

// The hot functions alone, per block.

func BenchmarkHash64Bytes(b *testing.B) {
	buf := make([]byte, 64)
	var h uint64
	for b.Loop() {
		h += defaultKeys.hash64(buf)
	}
	_ = h
}

func BenchmarkHash256Bytes(b *testing.B) {
	buf := make([]byte, 256)
	var h uint64
	for b.Loop() {
		h += defaultKeys.hash(buf)
	}
	_ = h
}

func BenchmarkChainHash(b *testing.B) {
	var h uint64
	for i := 0; b.Loop(); i++ {
		h = ChainHash(h, uint64(i))
	}
	_ = h
}

// The library on the same inputs, for comparison on a noisy machine.
func BenchmarkHash256BytesLibrary(b *testing.B) {
	buf := make([]byte, 256)
	var h uint64
	for b.Loop() {
		h += xxh3.HashSeed(buf, Seed)
	}
	_ = h
}

func BenchmarkHash64BytesLibrary(b *testing.B) {
	buf := make([]byte, 64)
	var h uint64
	for b.Loop() {
		h += xxh3.HashSeed(buf, Seed)
	}
	_ = h
}

// TestAccumulateMatchesGeneric checks the architecture's accumulate (SSE2
// assembly on amd64) against the portable one on random stripes and keys.
func TestAccumulateMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	b := make([]byte, 16*stripeLen)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	k := newKeys(rng.Uint64())
	for stripes := 1; stripes <= blockStripe; stripes++ {
		var got, want [8]uint64
		for i := range got {
			got[i] = rng.Uint64()
			want[i] = got[i]
		}
		accumulate(&got, b, k.w[:], stripes)
		accumulateGeneric(&want, b, k.w[:], stripes)
		if got != want {
			t.Fatalf("%d stripes: %x, generic %x", stripes, got, want)
		}
	}
}

// FuzzXXH3 compares the package's XXH3-64 with the library on arbitrary
// inputs and seeds.
func FuzzXXH3(f *testing.F) {
	f.Add([]byte("test data"), Seed)
	f.Add(make([]byte, 64), uint64(0))
	f.Add(make([]byte, 256), Seed)
	f.Add(make([]byte, 1500), uint64(7))
	f.Fuzz(func(t *testing.T, b []byte, seed uint64) {
		k := newKeys(seed)
		if got, want := k.hash(b), xxh3.HashSeed(b, seed); got != want {
			t.Fatalf("%d bytes, seed %d: %#x, library %#x", len(b), seed, got, want)
		}
	})
}

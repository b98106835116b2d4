package affine

import (
	"encoding/binary"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/kcand/kcand/sdk/bf16"
	"github.com/kcand/kcand/sdk/spec"
)

// Quantize turns dense weights w [out][in] into the affine layout with the
// request's bits and group size: per group, scale = (max−min)/(2^bits−1) and
// bias = min, both rounded to bf16, and q = round((w−bias)/scale) clamped to
// the representable range. The result maps binding names to bytes.
func Quantize(req spec.Request, w []float32) map[string][]byte {
	in, out, g, bits := req.InFeatures, req.OutFeatures, req.Weight.GroupSize, req.Weight.Bits
	groups := in / g
	levels := float32(int(1)<<bits - 1)
	rowBytes := RowWords(req) * 4
	packed := make([]byte, 0, out*rowBytes)
	scales := make([]float32, out*groups)
	biases := make([]float32, out*groups)
	q := make([]uint8, in)
	for o := 0; o < out; o++ {
		row := w[o*in : (o+1)*in]
		for gi := 0; gi < groups; gi++ {
			lo, hi := row[gi*g], row[gi*g]
			for _, v := range row[gi*g : (gi+1)*g] {
				lo, hi = min(lo, v), max(hi, v)
			}
			scale := bf16.Round((hi - lo) / levels)
			if scale == 0 {
				scale = bf16.Round(1e-6)
			}
			bias := bf16.Round(lo)
			for i := gi * g; i < (gi+1)*g; i++ {
				v := math.Round(float64((row[i] - bias) / scale))
				q[i] = uint8(min(max(v, 0), float64(levels)))
			}
			scales[o*groups+gi], biases[o*groups+gi] = scale, bias
		}
		packed = append(packed, Pack(q, bits)...)
	}
	return map[string][]byte{Weight: packed, Scales: bf16.Encode(scales), Biases: bf16.Encode(biases)}
}

// RandomSample draws a sample with the given seed: x uniform in [-1, 1),
// and weights drawn directly in quantised form. Packed weights are random
// bytes, which makes every q of every bit width uniform over its levels;
// scales and biases spread around a typical model's. A sample of a layer of
// a hundred million weights costs a fraction of a second. The weights
// depend on the seed and the weight shape alone, never on the token count
// (RandomInputs makes the inputs alone).
func RandomSample(req spec.Request, seed uint64) spec.Sample {
	in, out, g, bits := req.InFeatures, req.OutFeatures, req.Weight.GroupSize, req.Weight.Bits
	groups := in / g
	levels := float32(int(1) << bits)
	packed := make([]byte, out*RowWords(req)*4)
	fillRandom(packed, seed)
	scales := make([]byte, 2*out*groups)
	biases := make([]byte, 2*out*groups)
	forChunks(out*groups, func(c, lo, hi int) {
		r := newChunkRand(seed^0x5ca1e5b1a5e5, uint64(c))
		for i := lo; i < hi; i++ {
			u := r.next() // two 24-bit uniforms: the scale's and the bias's
			bf16.Set(scales, i, (0.5+unit24(u))*2/levels)
			bf16.Set(biases, i, -1+0.5*unit24(u>>32))
		}
	})
	weights := map[string][]byte{Weight: packed, Scales: scales, Biases: biases}
	if req.Bias {
		brng := rand.New(rand.NewPCG(seed^0xb1a5, 0x6b63616e64))
		bias := make([]float32, out)
		for i := range bias {
			bias[i] = brng.Float32()*2 - 1
		}
		weights[Bias] = bf16.Encode(bias)
	}
	return spec.Sample{Weights: weights, Inputs: RandomInputs(req, seed)}
}

// RandomInputs are RandomSample's inputs: x uniform in [-1, 1), drawn from
// the seed.
func RandomInputs(req spec.Request, seed uint64) map[string][]byte {
	rng := rand.New(rand.NewPCG(seed, 0x6b63616e64))
	x := make([]float32, req.Tokens*req.InFeatures)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	return map[string][]byte{X: bf16.Encode(x)}
}

// NonFiniteSamples are RandomSample with a NaN in the first token's inputs
// (at input in/3) and +∞ in the last token's (at input in/2): every output
// of the first token is NaN in the float64 reference, and the last token's
// are infinite (NaN where the weight is 0), while the other tokens' are
// finite. At one token they are two samples, one with the NaN and one with
// the infinity; else one with both. Kernels must carry both through (see
// the package comment), not turn them into numbers or let them reach other
// tokens.
func NonFiniteSamples(req spec.Request, seed uint64) []spec.Sample {
	in := req.InFeatures
	last := (req.Tokens-1)*in + in/2
	s := RandomSample(req, seed)
	bf16.Set(s.Inputs[X], in/3, float32(math.NaN()))
	if req.Tokens > 1 {
		bf16.Set(s.Inputs[X], last, float32(math.Inf(1)))
		return []spec.Sample{s}
	}
	inf := spec.Sample{Weights: s.Weights, Inputs: RandomInputs(req, seed)}
	bf16.Set(inf.Inputs[X], last, float32(math.Inf(1)))
	return []spec.Sample{s, inf}
}

// sampleChunk is how many elements forChunks hands one goroutine. It is
// fixed, so a sample depends on its seed alone, not on the core count.
const sampleChunk = 1 << 16

// forChunks runs body over [0, n) in chunks of sampleChunk, in parallel on
// every core; chunk c covers [c·sampleChunk, min(n, (c+1)·sampleChunk)).
func forChunks(n int, body func(c, lo, hi int)) {
	parallel((n+sampleChunk-1)/sampleChunk, func(c int) {
		body(c, c*sampleChunk, min(n, (c+1)*sampleChunk))
	})
}

// parallel runs body(c) for every c in [0, chunks) on every core.
func parallel(chunks int, body func(c int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(runtime.GOMAXPROCS(0), chunks); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := int(next.Add(1) - 1); c < chunks; c = int(next.Add(1) - 1) {
				body(c)
			}
		}()
	}
	wg.Wait()
}

// fillRandom fills b with random bytes from seed, in parallel chunks each
// with its own generator, so the result depends on seed alone.
func fillRandom(b []byte, seed uint64) {
	const chunk = 1 << 22
	parallel((len(b)+chunk-1)/chunk, func(c int) {
		part := b[c*chunk : min((c+1)*chunk, len(b))]
		r := newChunkRand(seed, uint64(c))
		for i := 0; i+32 <= len(part); i += 32 {
			w := part[i : i+32 : i+32]
			binary.LittleEndian.PutUint64(w[0:], r.next())
			binary.LittleEndian.PutUint64(w[8:], r.next())
			binary.LittleEndian.PutUint64(w[16:], r.next())
			binary.LittleEndian.PutUint64(w[24:], r.next())
		}
		for i := len(part) &^ 31; i < len(part); i++ {
			part[i] = byte(r.next())
		}
	})
}

// chunkRand is the generator of one chunk of a random sample: wyrand, a
// 64-bit counter mixed by one 128-bit multiply. It is not for
// cryptography; it is several times faster than math/rand/v2's PCG, and a
// 132 MB layer's sample is a hundred million bytes of it made on every
// measurement of a new layer.
type chunkRand struct{ state uint64 }

// newChunkRand starts the generator of chunk c of the sample with seed.
func newChunkRand(seed, c uint64) chunkRand {
	return chunkRand{state: splitMix(seed ^ splitMix(c+0x9e3779b97f4a7c15))}
}

func (r *chunkRand) next() uint64 {
	r.state += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(r.state, r.state^0xe7037ed1a0b428db)
	return hi ^ lo
}

// splitMix is SplitMix64's finaliser: it spreads nearby seeds apart.
func splitMix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// unit24 is u's low 24 bits as a uniform float32 in [0, 1).
func unit24(u uint64) float32 { return float32(u&(1<<24-1)) / (1 << 24) }

// PatternSample builds deterministic inputs that exercise every quantised
// level, every group's scale and bias, and every token row differently, so
// that indexing mistakes show up as wrong values. Like RandomSample's, its
// weights do not depend on the token count (PatternInputs makes the inputs
// alone).
func PatternSample(req spec.Request) spec.Sample {
	in, out, g, bits := req.InFeatures, req.OutFeatures, req.Weight.GroupSize, req.Weight.Bits
	groups := in / g
	levels := 1 << bits
	rowBytes := RowWords(req) * 4
	packed := make([]byte, out*rowBytes)
	// q depends on o only through o·5 mod levels: rows repeat with period
	// levels, so pack each distinct row once and copy it.
	q := make([]uint8, in)
	for o := 0; o < min(out, levels); o++ {
		for i := range q {
			q[i] = uint8((o*5 + i + 3*(i/levels)) % levels)
		}
		copy(packed[o*rowBytes:], Pack(q, bits))
	}
	scales := make([]byte, 2*out*groups)
	biases := make([]byte, 2*out*groups)
	rowsPerChunk := max(1, sampleChunk/groups)
	parallel((out+rowsPerChunk-1)/rowsPerChunk, func(c int) {
		for o := c * rowsPerChunk; o < min(out, (c+1)*rowsPerChunk); o++ {
			if o >= levels {
				copy(packed[o*rowBytes:(o+1)*rowBytes], packed[(o%levels)*rowBytes:])
			}
			for gi := 0; gi < groups; gi++ {
				bf16.Set(scales, o*groups+gi, float32(1+(o+gi)%4)/float32(levels))
				bf16.Set(biases, o*groups+gi, float32((o*3+gi)%5-2)/8)
			}
		}
	})
	weights := map[string][]byte{Weight: packed, Scales: scales, Biases: biases}
	if req.Bias {
		bias := make([]float32, out)
		for o := range bias {
			bias[o] = float32(o%9-4) / 4
		}
		weights[Bias] = bf16.Encode(bias)
	}
	return spec.Sample{Weights: weights, Inputs: PatternInputs(req)}
}

// PatternInputs are PatternSample's inputs: every token row of x a
// different pattern.
func PatternInputs(req spec.Request) map[string][]byte {
	in := req.InFeatures
	x := make([]float32, req.Tokens*in)
	for t := 0; t < req.Tokens; t++ {
		for i := 0; i < in; i++ {
			x[t*in+i] = float32((i*7+t*3)%17-8) / 8
		}
	}
	return map[string][]byte{X: bf16.Encode(x)}
}

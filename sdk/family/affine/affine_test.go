package affine

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk/bf16"
	"github.com/kcand/kcand/sdk/errdefs"
	"github.com/kcand/kcand/sdk/spec"
)

func request(tokens, in, out, bits, group int) spec.Request {
	return spec.Request{
		Family: spec.FamilyAffine, Phase: spec.PhaseDecode, Tokens: tokens, InFeatures: in, OutFeatures: out,
		Weight: spec.Format{Kind: FormatKind, Bits: bits, GroupSize: group}, Activation: spec.BF16,
	}
}

func TestPackUnpackRoundTripsEveryWidth(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bits := range SupportedBits {
		q := make([]uint8, 256)
		for i := range q {
			q[i] = uint8(rng.IntN(1 << bits))
		}
		row := Pack(q, bits)
		require.Len(t, row, 256*bits/8)
		fast := make([]uint8, len(q))
		UnpackRow(row, bits, fast)
		for i := range q {
			require.Equal(t, uint32(q[i]), Unpack(row, i, bits), "bits=%d i=%d", bits, i)
		}
		require.Equal(t, q, fast, "bits=%d UnpackRow", bits)
	}
}

// TestPackingMatchesMLX checks hand-packed bytes in MLX's layout: 3-bit
// values straddle bytes, value 3 of a run of 8 starts at bit 1 of byte 1.
func TestPackingMatchesMLX(t *testing.T) {
	q := []uint8{1, 2, 3, 4, 5, 6, 7, 0}
	// bit stream: 001 010 011 100 101 110 111 000 (value 0 in the low bits)
	// byte0 = v0 | v1<<3 | (v2&3)<<6 = 1 | 16 | 192 = 0xd1
	// byte1 = v2>>2 | v3<<1 | v4<<4 | (v5&1)<<7 = 0 | 8 | 80 | 0 = 0x58
	// byte2 = v5>>1 | v6<<2 | v7<<5 = 3 | 28 | 0 = 0x1f
	assert.Equal(t, []byte{0xd1, 0x58, 0x1f}, Pack(q, 3))
	// 4-bit: two values per byte, low nibble first; a uint32 holds 8 values.
	assert.Equal(t, []byte{0x21, 0x43, 0x65, 0x07}, Pack(q, 4))
	// 6-bit: 4 values in 3 bytes.
	assert.Equal(t, []byte{0x81, 0x30, 0x10}, Pack(q[:4], 6))
}

func TestValidateNamesFieldAndValue(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*spec.Request)
		field string
	}{
		{"zero tokens", func(r *spec.Request) { r.Tokens = 0 }, "tokens"},
		{"zero out", func(r *spec.Request) { r.OutFeatures = 0 }, "out_features"},
		{"bits", func(r *spec.Request) { r.Weight.Bits = 7 }, "weight.bits"},
		{"group", func(r *spec.Request) { r.Weight.GroupSize = 48 }, "weight.group_size"},
		{"group does not divide", func(r *spec.Request) { r.InFeatures = 320 }, "weight.group_size"},
		{"activation", func(r *spec.Request) { r.Activation = spec.F32 }, "activation"},
		{"format", func(r *spec.Request) { r.Weight.Kind = "mxfp4" }, "weight.kind"},
		{"family", func(r *spec.Request) { r.Family = spec.FamilyFP8 }, "family"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := request(1, 256, 64, 4, 128)
			tc.edit(&req)
			err := Validate(req)
			var fe *errdefs.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
			assert.ErrorIs(t, err, errdefs.ErrInvalidRequest)
		})
	}
	assert.NoError(t, Validate(request(1, 256, 64, 4, 128)))
}

// TestQuantizeIsCloseToTheDenseWeights checks the quantiser's error is
// bounded by half a step per group.
func TestQuantizeIsCloseToTheDenseWeights(t *testing.T) {
	for _, bits := range SupportedBits {
		req := request(1, 128, 4, bits, 32)
		rng := rand.New(rand.NewPCG(3, uint64(bits)))
		w := make([]float32, req.OutFeatures*req.InFeatures)
		for i := range w {
			w[i] = rng.Float32()*2 - 1
		}
		q := Quantize(req, w)
		for o := 0; o < req.OutFeatures; o++ {
			row := DequantizeRow(req, q, o)
			for i, v := range row {
				step := float64(bf16.Get(q[Scales], o*Groups(req)+i/32))
				assert.InDelta(t, w[o*req.InFeatures+i], v, step*0.5+0.02, "bits=%d o=%d i=%d", bits, o, i)
			}
		}
	}
}

func TestReferenceMatchesDenseProduct(t *testing.T) {
	req := request(2, 64, 3, 4, 32)
	req.Bias = true
	s := RandomSample(req, 7)
	got := Reference(req, s.Weights, s.Inputs[X])
	for tok := 0; tok < 2; tok++ {
		for o := 0; o < 3; o++ {
			w := DequantizeRow(req, s.Weights, o)
			var want float64
			for i := 0; i < 64; i++ {
				want += float64(bf16.Get(s.Inputs[X], tok*64+i)) * w[i]
			}
			want += float64(bf16.Get(s.Weights[Bias], o))
			assert.InDelta(t, want, got[tok*3+o], 1e-9)
		}
	}
}

func TestGate(t *testing.T) {
	want := []float64{0, 100, -3}
	ok := bf16.Encode([]float32{0.1, 100.5, -3.05})
	assert.NoError(t, Check(ok, want))
	bad := bf16.Encode([]float32{0.1, 102, -3})
	err := Check(bad, want)
	var ge *GateError
	require.ErrorAs(t, err, &ge)
	assert.Equal(t, 1, ge.Worst.Index)
	assert.Equal(t, 1, ge.Failed)
	nan := bf16.Encode([]float32{float32(math.NaN()), 100, -3})
	require.ErrorAs(t, Check(nan, want), &ge)
	assert.Equal(t, 0, ge.Worst.Index, "NaN never passes")
	assert.Error(t, Check(ok[:2], want), "short output")
}

// TestGateAgainstNonFiniteReferences: where the float64 reference is NaN
// the output must be NaN, where it is an infinity that infinity or NaN;
// against another output (the tuner's comparison) nothing non-finite passes.
func TestGateAgainstNonFiniteReferences(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	want := []float64{nan, inf, -inf, 2}
	f := func(v ...float64) []byte {
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = float32(x)
		}
		return bf16.Encode(out)
	}
	assert.NoError(t, Check(f(nan, inf, -inf, 2), want))
	assert.NoError(t, Check(f(nan, nan, nan, 2), want), "an infinity may come out as NaN")
	for i, got := range [][]byte{
		f(0, inf, -inf, 2),    // a number for NaN
		f(nan, 1e30, -inf, 2), // a number for an infinity
		f(nan, -inf, -inf, 2), // the wrong infinity
		f(nan, inf, inf, 2),
		f(nan, inf, -inf, nan), // NaN where the reference is finite
	} {
		var ge *GateError
		require.ErrorAs(t, Check(got, want), &ge, "case %d", i)
		assert.Equal(t, 1, ge.Failed, "case %d", i)
	}
	ref := f(nan, inf, -inf, 2)
	var ge *GateError
	require.ErrorAs(t, CheckAgainst(ref, ref), &ge)
	assert.Equal(t, 3, ge.Failed, "CheckAgainst passes no non-finite element")
}

// TestNonFiniteSamples: the first token's reference is NaN everywhere, the
// last token's infinite or NaN, the others' finite and as RandomSample's;
// at one token the NaN and the infinity come in two samples.
func TestNonFiniteSamples(t *testing.T) {
	req := request(3, 256, 40, 4, 64)
	req.Bias = true
	samples := NonFiniteSamples(req, 5)
	require.Len(t, samples, 1)
	s := samples[0]
	plain := RandomSample(req, 5)
	ref := Reference(req, s.Weights, s.Inputs[X])
	want := Reference(req, plain.Weights, plain.Inputs[X])
	out := req.OutFeatures
	for o := range out {
		assert.True(t, math.IsNaN(ref[o]), "token 0, output %d: %g", o, ref[o])
		last := ref[2*out+o]
		assert.True(t, math.IsNaN(last) || math.IsInf(last, 0), "token 2, output %d: %g", o, last)
		assert.Equal(t, want[out+o], ref[out+o], "token 1, output %d", o)
	}
	one := req
	one.Tokens = 1
	two := NonFiniteSamples(one, 5)
	require.Len(t, two, 2)
	for i := range one.InFeatures {
		assert.Equal(t, i == one.InFeatures/3, math.IsNaN(float64(bf16.Get(two[0].Inputs[X], i))), "input %d", i)
		assert.Equal(t, i == one.InFeatures/2, math.IsInf(float64(bf16.Get(two[1].Inputs[X], i)), 1), "input %d", i)
	}
	assert.Equal(t, two[0].Weights, two[1].Weights, "one sample's weights")
	ref = Reference(one, two[1].Weights, two[1].Inputs[X])
	for o, v := range ref {
		assert.True(t, math.IsNaN(v) || math.IsInf(v, 0), "output %d: %g", o, v)
	}
}

// TestGateAcrossChunks checks a gate spread over goroutines counts every
// failure and names the first of the worst elements, wherever they fall.
func TestGateAcrossChunks(t *testing.T) {
	n := 3*gateChunk + 5
	want := make([]float64, n)
	for i := range want {
		want[i] = float64(i%97) - 48
	}
	got := bf16.Encode(func() []float32 {
		f := make([]float32, n)
		for i, w := range want {
			f[i] = float32(w)
		}
		return f
	}())
	require.NoError(t, Check(got, want))
	require.NoError(t, CheckAgainst(got, got))
	bad := append([]byte(nil), got...)
	tie := gateChunk + 7 + 97*((gateChunk+96)/97)            // a chunk later, the same reference value
	bf16.Set(bad, 10, float32(want[10]+1))                   // over tolerance, not the worst
	bf16.Set(bad, gateChunk+7, float32(want[gateChunk+7]+4)) // the worst, first of two
	bf16.Set(bad, tie, float32(want[tie]+4))                 // as bad, later
	require.Equal(t, want[gateChunk+7], want[tie])
	require.Greater(t, tie/gateChunk, (gateChunk+7)/gateChunk)
	for name, err := range map[string]error{"Check": Check(bad, want), "CheckAgainst": CheckAgainst(bad, got)} {
		var ge *GateError
		require.ErrorAs(t, err, &ge, name)
		assert.Equal(t, 3, ge.Failed, name)
		assert.Equal(t, n, ge.Total, name)
		assert.Equal(t, gateChunk+7, ge.Worst.Index, name)
	}
	assert.Error(t, CheckAgainst(got[:len(got)-2], got), "short output")
}

func TestSpotCheckFindsAWrongElement(t *testing.T) {
	req := request(3, 256, 40, 5, 64)
	s := RandomSample(req, 9)
	ref := Reference(req, s.Weights, s.Inputs[X])
	y := make([]byte, 2*len(ref))
	for i, v := range ref {
		bf16.Set(y, i, float32(v))
	}
	require.NoError(t, SpotCheck(req, s, y, 0))
	require.NoError(t, SpotCheck(req, s, y, 17))
	bf16.Set(y, 57, float32(ref[57]+5))
	assert.Error(t, SpotCheck(req, s, y, 0), "the full check sees element 57")
}

// TestSampledReferenceMatchesTheFullReference checks the parallel spot
// check against Reference: each returned pair of output bytes names its
// element (the output holds each element's index), and the reference value
// beside it must equal Reference's for that element to the bit. Packings
// that cross words (3 and 5 bits), a bias and several tokens, on one core
// and on four; the elements must be in order and cover every token.
func TestSampledReferenceMatchesTheFullReference(t *testing.T) {
	for _, bits := range []int{3, 4, 5, 8} {
		req := request(3, 512, 136, bits, 64)
		req.Bias = bits != 4
		s := RandomSample(req, uint64(11+bits))
		ref := Reference(req, s.Weights, s.Inputs[X])
		y := make([]byte, 2*len(ref))
		for i := range ref {
			y[2*i], y[2*i+1] = byte(i), byte(i>>8)
		}
		for _, n := range []int{0, 37, 100} {
			for _, procs := range []int{1, 4} {
				prev := runtime.GOMAXPROCS(procs)
				got, want := SampledReference(req, s, y, n)
				runtime.GOMAXPROCS(prev)
				require.Len(t, got, 2*len(want), "bits=%d n=%d", bits, n)
				if n == 0 {
					require.Len(t, want, len(ref), "n=0 checks every element")
				} else {
					require.GreaterOrEqual(t, len(want), n, "bits=%d n=%d", bits, n)
					require.Less(t, len(want), 2*n, "bits=%d n=%d", bits, n)
				}
				tokens := map[int]bool{}
				last := -1
				for j, v := range want {
					idx := int(got[2*j]) | int(got[2*j+1])<<8
					require.Greater(t, idx, last, "bits=%d n=%d: elements in order", bits, n)
					last = idx
					tokens[idx/req.OutFeatures] = true
					assert.Equal(t, ref[idx], v, "bits=%d n=%d element %d", bits, n, idx)
				}
				assert.Len(t, tokens, req.Tokens, "bits=%d n=%d: every token", bits, n)
			}
		}
	}
	// A short output fails the check on its length instead of panicking.
	req := request(1, 512, 136, 4, 64)
	s := RandomSample(req, 3)
	assert.Error(t, SpotCheck(req, s, make([]byte, 10), 17))
}

func TestPatternSampleUsesEveryLevel(t *testing.T) {
	for _, bits := range SupportedBits {
		req := request(1, 256, 8, bits, 64)
		s := PatternSample(req)
		seen := map[uint32]bool{}
		for i := 0; i < 256; i++ {
			seen[Unpack(s.Weights[Weight], i, bits)] = true
		}
		assert.Len(t, seen, 1<<bits, "bits=%d", bits)
	}
}

func TestSamplesDependOnTheSeedAloneNotOnTheCoreCount(t *testing.T) {
	// Large enough for several parallel chunks of scales and rows.
	req := request(2, 4096, 520, 4, 32)
	prev := runtime.GOMAXPROCS(1)
	oneCoreRandom, oneCorePattern := RandomSample(req, 7), PatternSample(req)
	runtime.GOMAXPROCS(max(4, prev))
	manyRandom, manyPattern := RandomSample(req, 7), PatternSample(req)
	runtime.GOMAXPROCS(prev)
	assert.Equal(t, oneCoreRandom, manyRandom)
	assert.Equal(t, oneCorePattern, manyPattern)
	other := RandomSample(req, 8)
	assert.NotEqual(t, manyRandom.Weights[Scales], other.Weights[Scales], "the seed drives the scales")
	assert.NotEqual(t, manyRandom.Weights[Weight], other.Weights[Weight])
	// Pattern rows repeat with period 2^bits and the scales follow the formula.
	rowBytes := RowWords(req) * 4
	w := manyPattern.Weights[Weight]
	assert.Equal(t, w[3*rowBytes:4*rowBytes], w[(3+16)*rowBytes:(4+16)*rowBytes])
	groups := req.InFeatures / req.Weight.GroupSize
	for _, o := range []int{0, 17, 519} {
		for _, gi := range []int{0, groups - 1} {
			assert.Equal(t, float32(1+(o+gi)%4)/16, bf16.Get(manyPattern.Weights[Scales], o*groups+gi))
			assert.Equal(t, float32((o*3+gi)%5-2)/8, bf16.Get(manyPattern.Weights[Biases], o*groups+gi))
		}
	}
}

func TestSampleWeightsDoNotDependOnTheTokenCount(t *testing.T) {
	// A host keeps one count's sample weights for the layer's other counts
	// and makes only the inputs anew: that must give the same samples.
	one, many := request(1, 256, 24, 4, 64), request(7, 256, 24, 4, 64)
	one.Bias, many.Bias = true, true
	for _, seed := range []uint64{3, 4} {
		a, b := RandomSample(one, seed), RandomSample(many, seed)
		assert.Equal(t, a.Weights, b.Weights, "random weights, seed %d", seed)
		assert.Equal(t, b.Inputs, RandomInputs(many, seed), "RandomInputs is RandomSample's inputs")
		assert.NotEqual(t, a.Inputs, b.Inputs)
	}
	p1, p7 := PatternSample(one), PatternSample(many)
	assert.Equal(t, p1.Weights, p7.Weights, "pattern weights")
	assert.Equal(t, p7.Inputs, PatternInputs(many), "PatternInputs is PatternSample's inputs")
	assert.Len(t, p7.Inputs[X], 2*7*256)
}

func TestRandomSampleIsUniformOverTheLevelsAndTheScalesInRange(t *testing.T) {
	req := request(1, 1024, 256, 4, 64)
	s := RandomSample(req, 5)
	counts := make([]int, 16)
	n := req.InFeatures * req.OutFeatures
	for i := 0; i < n; i++ {
		counts[Unpack(s.Weights[Weight], i, 4)]++
	}
	for q, c := range counts {
		assert.InDelta(t, n/16, c, float64(n/16)/10, "level %d drawn %d times of %d", q, c, n)
	}
	groups := req.OutFeatures * req.InFeatures / req.Weight.GroupSize
	for i := 0; i < groups; i++ {
		scale, bias := bf16.Get(s.Weights[Scales], i), bf16.Get(s.Weights[Biases], i)
		require.True(t, scale >= 1.0/16 && scale <= 3.0/16, "scale %d = %v", i, scale)
		require.True(t, bias >= -1 && bias <= -0.5, "bias %d = %v", i, bias)
	}
}

func TestFillRandomFillsEveryByteOfAnOddLength(t *testing.T) {
	b := make([]byte, 2<<22+7) // two whole chunks, and one shorter than a word
	prev := runtime.GOMAXPROCS(1)
	fillRandom(b, 9)
	runtime.GOMAXPROCS(max(4, prev))
	again := make([]byte, len(b))
	fillRandom(again, 9)
	runtime.GOMAXPROCS(prev)
	assert.NotEqual(t, make([]byte, 7), b[len(b)-7:], "the short chunk is filled")
	assert.Equal(t, b, again, "the seed alone decides the bytes, not the core count")
	assert.NotEqual(t, b[:64], b[1<<22:1<<22+64], "chunks differ")
	fillRandom(again, 10)
	assert.NotEqual(t, b[:64], again[:64])
}

package affine

import (
	"github.com/kcand/kcand/sdk/bf16"
	"github.com/kcand/kcand/sdk/spec"
)

// Reference computes y in float64 from the same quantised weights the
// candidates read: the family's numeric reference. It returns
// [tokens][out_features] values in row-major order.
func Reference(req spec.Request, weights map[string][]byte, x []byte) []float64 {
	y := make([]float64, req.Tokens*req.OutFeatures)
	for o := 0; o < req.OutFeatures; o++ {
		w := DequantizeRow(req, weights, o)
		for t := 0; t < req.Tokens; t++ {
			y[t*req.OutFeatures+o] = ReferenceElement(req, weights, x, w, t, o)
		}
	}
	return y
}

// ReferenceElement computes one element y[t][o] in float64, given the
// dequantised row w of output o (from DequantizeRow). The host uses it to
// spot-check large outputs without computing all of them.
func ReferenceElement(req spec.Request, weights map[string][]byte, x []byte, w []float64, t, o int) float64 {
	in := req.InFeatures
	xt := x[2*t*in : 2*(t+1)*in]
	var acc float64
	for i, wi := range w {
		acc += float64(bf16.ToFloat32(uint16(xt[2*i])|uint16(xt[2*i+1])<<8)) * wi
	}
	if req.Bias {
		acc += float64(bf16.Get(weights[Bias], o))
	}
	return acc
}

// DequantizeRow returns W[o][:] in float64.
func DequantizeRow(req spec.Request, weights map[string][]byte, o int) []float64 {
	in, g, bits := req.InFeatures, req.Weight.GroupSize, req.Weight.Bits
	groups := in / g
	rowBytes := RowWords(req) * 4
	q := make([]uint8, in)
	UnpackRow(weights[Weight][o*rowBytes:(o+1)*rowBytes], bits, q)
	w := make([]float64, in)
	for gi := 0; gi < groups; gi++ {
		s := float64(bf16.Get(weights[Scales], o*groups+gi))
		b := float64(bf16.Get(weights[Biases], o*groups+gi))
		for i := gi * g; i < (gi+1)*g; i++ {
			w[i] = s*float64(q[i]) + b
		}
	}
	return w
}

// SpotCheck compares y against the float64 reference at up to n elements
// (n ≤ 0: all): every element when the output has at most n, else n elements
// on a stride that visits every token and many rows.
func SpotCheck(req spec.Request, sample spec.Sample, y []byte, n int) error {
	got, want := SampledReference(req, sample, y, n)
	return Check(got, want)
}

// SampledReference picks about n elements of y (n ≤ 0: all; fewer than 2n)
// on a stride through the output and returns them (as bf16 bytes) with their float64
// reference values.
//
// The elements are independent, so they are computed in parallel, each
// without dequantising its row into a new slice first; the arithmetic is
// ReferenceElement's on DequantizeRow's weights, in the same order, so the
// values are the same to the bit. The tuner runs this on every sample of
// every measurement: on one core, 256 elements of a layer with 14336
// inputs took 43 ms.
func SampledReference(req spec.Request, sample spec.Sample, y []byte, n int) ([]byte, []float64) {
	total := req.Tokens * req.OutFeatures
	stride := 1
	if n > 0 && total > n {
		stride = total / n
		if stride%req.OutFeatures == 0 {
			stride++ // keep walking across rows rather than revisiting one
		}
	}
	count := (total + stride - 1) / stride
	want := make([]float64, count)
	if len(y) < 2*total {
		// A short output fails the gate on its length (Check), not with
		// a panic in a worker.
		return nil, want
	}
	got := make([]byte, 2*count)
	// A chunk of consecutive elements shares one unpacking buffer.
	// Consecutive elements never share a row (the stride is not a multiple
	// of out_features), so each unpacks its own.
	const chunk = 16
	rowBytes := RowWords(req) * 4
	parallel((count+chunk-1)/chunk, func(c int) {
		q := make([]uint8, req.InFeatures)
		for j := c * chunk; j < min(count, (c+1)*chunk); j++ {
			idx := j * stride
			t, o := idx/req.OutFeatures, idx%req.OutFeatures
			UnpackRow(sample.Weights[Weight][o*rowBytes:(o+1)*rowBytes], req.Weight.Bits, q)
			want[j] = unpackedElement(req, sample.Weights, sample.Inputs[X], q, t, o)
			got[2*j], got[2*j+1] = y[2*idx], y[2*idx+1]
		}
	})
	return got, want
}

// unpackedElement is ReferenceElement with the row's weights dequantised
// as they are used: w = s·q + b per value (DequantizeRow's arithmetic),
// then acc += x·w in input order.
func unpackedElement(req spec.Request, weights map[string][]byte, x []byte, q []uint8, t, o int) float64 {
	in, g := req.InFeatures, req.Weight.GroupSize
	groups := in / g
	xt := x[2*t*in : 2*(t+1)*in]
	var acc float64
	for gi := 0; gi < groups; gi++ {
		s := float64(bf16.Get(weights[Scales], o*groups+gi))
		b := float64(bf16.Get(weights[Biases], o*groups+gi))
		xg := xt[2*gi*g : 2*(gi+1)*g]
		for i, qi := range q[gi*g : (gi+1)*g] {
			w := s*float64(qi) + b
			acc += float64(bf16.ToFloat32(uint16(xg[2*i])|uint16(xg[2*i+1])<<8)) * w
		}
	}
	if req.Bias {
		acc += float64(bf16.Get(weights[Bias], o))
	}
	return acc
}

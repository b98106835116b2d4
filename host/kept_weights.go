package host

import (
	"fmt"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/family"
)

// sampleNames are a measurement's two samples, in the order they are
// checked: the pattern sample, then the random one (on which the survivors
// stay prepared and are timed).
var sampleNames = [2]string{"pattern", "random"}

// DefaultKeepSampleBytes is how much device memory the measurer keeps
// sample weights in by default (MeasureOptions.KeepSampleBytes): every
// layer shape of one transformer block of a 70B model at 4 bits, both
// samples of each.
const DefaultKeepSampleBytes = 1 << 30

// keptWeights are the device copies of one layer shape's two sample
// weights, the pattern sample's and the random sample's, kept from one
// measurement to the next. An engine tunes a layer at many token counts
// (decode, the representatives of prefill's token buckets, each count that
// shares a bucket's plan), and a sample's weights depend on the layer's
// shape and the seed, never on the count. A measurement at a kept shape
// makes and copies only its inputs: for a layer of 132 MB that saves
// making the weights on the host (about 30 ms) and copying them twice
// (17–24 ms each on the H200).
//
// The measurer keeps the shapes it measured last, up to
// MeasureOptions.KeepSampleBytes of device memory (keptSamples), until the
// host's Close. A candidate that writes into the weights it was handed
// would spoil the next measurement's samples; the fallback's check against
// the float64 reference, computed from the host's copy, then fails, and
// the measurement drops the kept weights and checks again on fresh copies
// (examine).
type keptWeights struct {
	shape string
	host  [2]map[string][]byte
	// dev holds each sample's weights; dev[1] == dev[0] when a second set
	// did not fit.
	dev [2]*bufferSet
	// holds says which sample's weights a set holds now (absent: unknown).
	holds map[*bufferSet]int
	// bytes is the device memory of dev.
	bytes int64
}

// weightShape names what a sample's weights depend on: the request but
// for its token count and phase, and the seed.
func weightShape(req sdk.Request, seed uint64) string {
	req.Tokens, req.Phase = 0, ""
	return fmt.Sprintf("%s seed=%#x", req.Key(), seed)
}

// load makes sure sample i's weights are in its set, copying them there if
// not; it reports whether it copied.
func (k *keptWeights) load(i int) (bool, error) {
	set := k.dev[i]
	if h, ok := k.holds[set]; ok && h == i {
		return false, nil
	}
	delete(k.holds, set) // a failed write leaves the set holding nothing known
	if err := set.write(k.host[i]); err != nil {
		return false, err
	}
	k.holds[set] = i
	return true, nil
}

func (k *keptWeights) free() {
	for i, set := range k.dev {
		if set != nil && (i == 0 || set != k.dev[0]) {
			set.free()
		}
	}
}

// keptSamples are the measurer's kept sample weights, most recently used
// first, in at most limit bytes of device memory once a measurement ends
// (a layer larger than that alone is not kept). The caller holds
// measurer.busy.
type keptSamples struct {
	limit int64
	list  []*keptWeights
}

// get returns shape's kept weights, now the most recently used, or nil.
func (ks *keptSamples) get(shape string) *keptWeights {
	for i, k := range ks.list {
		if k.shape == shape {
			copy(ks.list[1:i+1], ks.list[:i])
			ks.list[0] = k
			return k
		}
	}
	return nil
}

// add keeps k as the most recently used, first freeing the least recently
// used until k fits beside the rest (or nothing else is kept).
func (ks *keptSamples) add(k *keptWeights) {
	ks.trim(ks.limit - k.bytes)
	ks.list = append([]*keptWeights{k}, ks.list...)
}

// trim frees the least recently used until at most limit bytes are kept.
func (ks *keptSamples) trim(limit int64) {
	for len(ks.list) > 0 && ks.bytes() > limit {
		last := len(ks.list) - 1
		ks.list[last].free()
		ks.list = ks.list[:last]
	}
}

// drop frees shape's kept weights, if kept.
func (ks *keptSamples) drop(shape string) {
	if k := ks.get(shape); k != nil {
		k.free()
		ks.list = ks.list[1:]
	}
}

func (ks *keptSamples) bytes() int64 {
	var n int64
	for _, k := range ks.list {
		n += k.bytes
	}
	return n
}

// samples returns req's two samples, pattern then random, and their
// weights' device sets: kept ones when req's shape is kept (reused; only
// the inputs are made), else made and allocated now and kept. The caller
// holds ms.busy, and calls ms.kept.trim(ms.kept.limit) once done with them.
func (ms *measurer) samples(c family.Contract, req sdk.Request) (samples [2]sdk.Sample, k *keptWeights, reused bool, err error) {
	shape := weightShape(req, ms.opts.Seed)
	// The two samples are independent: build them side by side (for a
	// layer of 10^8 weights each is tens of milliseconds of host work, and
	// the inputs of a few thousand tokens a few milliseconds).
	k = ms.kept.get(shape)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if k != nil {
			samples[1] = sdk.Sample{Weights: k.host[1], Inputs: c.RandomInputs(req, ms.opts.Seed)}
		} else {
			samples[1] = c.RandomSample(req, ms.opts.Seed)
		}
	}()
	if k != nil {
		samples[0] = sdk.Sample{Weights: k.host[0], Inputs: c.PatternInputs(req)}
	} else {
		samples[0] = c.PatternSample(req)
	}
	<-done
	if k != nil {
		return samples, k, true, nil
	}
	var size int64
	for _, n := range c.WeightSizes(req) {
		size += n
	}
	ms.kept.trim(ms.kept.limit - 2*size)
	k = &keptWeights{shape: shape, host: [2]map[string][]byte{samples[0].Weights, samples[1].Weights}, holds: map[*bufferSet]int{}, bytes: size}
	ms.work.Add(1)
	if k.dev[0], err = allocate(ms.dev, c.WeightSizes(req)); err != nil {
		return samples, nil, false, err
	}
	ms.work.Add(1)
	if k.dev[1], err = allocate(ms.dev, c.WeightSizes(req)); err != nil {
		ms.logger.Info("a second copy of the sample weights does not fit; the samples take turns in one", "request", req.Key(), "error", err)
		k.dev[1] = k.dev[0]
	} else {
		k.bytes += size
	}
	ms.kept.add(k)
	return samples, k, false, nil
}

// close frees what the measurer keeps on the device.
func (ms *measurer) close() {
	ms.busy.Lock()
	defer ms.busy.Unlock()
	ms.kept.trim(0)
}

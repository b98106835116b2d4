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
// sample weights in by default (MeasureOptions.KeepSampleBytes): the layers
// of one transformer block of a 70B model at 4 bits, both samples of each.
const DefaultKeepSampleBytes = 1 << 30

// keptWeights are one layer's two sample weights, the pattern sample's and
// the random sample's, kept on the device from one measurement to the
// next. An engine measures a layer at many token counts (decode, the
// representatives of prefill's token buckets, each count that shares a
// bucket's plan), and a sample's weights depend on the layer and the seed,
// never on the count. A measurement of a kept layer makes only its inputs
// and copies the weights device to device: for a layer of 132 MB that
// saves making them on the host (about 30 ms) and copying them from it
// twice (17–24 ms each on the H200).
//
// The kept copies are never handed to a plugin: each measurement copies
// them into weights of its own, so a candidate that writes into the
// weights it was handed spoils nothing beyond its own measurement, as
// before. The host also keeps the weights' bytes (the float64 reference
// is computed from them): host memory as large as the device memory.
type keptWeights struct {
	shape string
	host  [2]map[string][]byte
	dev   [2]*bufferSet
	bytes int64
}

// weightShape names what a sample's weights depend on: the request but
// for its token count and phase, and the seed.
func weightShape(req sdk.Request, seed uint64) string {
	req.Tokens, req.Phase = 0, ""
	return fmt.Sprintf("%s seed=%#x", req.Key(), seed)
}

func (k *keptWeights) free() {
	for _, set := range k.dev {
		if set != nil {
			set.free()
		}
	}
}

// keptSamples are the measurer's kept sample weights, most recently used
// first, in at most limit bytes of device memory (a layer larger than that
// alone is not kept). The caller holds measurer.busy.
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

// add keeps k as the most recently used.
func (ks *keptSamples) add(k *keptWeights) {
	ks.list = append([]*keptWeights{k}, ks.list...)
}

// trim frees the least recently used until at most limit bytes are kept.
func (ks *keptSamples) trim(limit int64) {
	for len(ks.list) > 0 && ks.bytes() > limit {
		last := len(ks.list) - 1
		ks.list[last].free()
		ks.list[last] = nil // the host copies go with it
		ks.list = ks.list[:last]
	}
}

func (ks *keptSamples) bytes() int64 {
	var n int64
	for _, k := range ks.list {
		n += k.bytes
	}
	return n
}

// sampleSet is a measurement's two samples, and where their weights come
// from: kept (copied device to device into the measurement's own weights)
// or the host.
type sampleSet struct {
	samples [2]sdk.Sample
	// makeRandom, when set, makes samples[1]: a new layer's random
	// sample is made once its pattern sample is on the device, while that
	// is checked (for a layer of 132 MB each sample is 12–20 ms of host
	// work on 16 cores, about as long as the check; made beside the
	// pattern's copy, it slowed the copy by a third). random is closed
	// once it is made.
	makeRandom func() sdk.Sample
	random     chan struct{}
	kept       *keptWeights
	// keep, when set, is the layer's new keptWeights, to be filled from
	// the measurement's weights as each sample is loaded (load).
	keep *keptWeights
}

// startRandom starts making the random sample, if it is to be made.
func (set *sampleSet) startRandom() {
	if set.makeRandom == nil || set.random != nil {
		return
	}
	set.random = make(chan struct{})
	go func(build func() sdk.Sample, random *sdk.Sample, made chan<- struct{}) {
		defer close(made)
		*random = build()
	}(set.makeRandom, &set.samples[1], set.random)
}

// pending says whether sample i is still to be made.
func (set *sampleSet) pending(i int) bool { return i == 1 && set.makeRandom != nil }

// sample returns sample i, making it or waiting for it to be made.
func (set *sampleSet) sample(i int) sdk.Sample {
	if set.pending(i) {
		set.startRandom()
		<-set.random
		set.makeRandom, set.random = nil, nil
	}
	return set.samples[i]
}

// samples makes req's two samples, pattern then random: only the inputs
// when the layer's weights are kept, else whole, making room to keep them
// when the layer fits the limit. A new layer's random sample is made
// later (sampleSet.startRandom and sample). The caller holds ms.busy.
func (ms *measurer) samples(c family.Contract, req sdk.Request) (set *sampleSet, err error) {
	set = &sampleSet{}
	shape := weightShape(req, ms.opts.Seed)
	if set.kept = ms.kept.get(shape); set.kept != nil {
		// Only the inputs: for a few thousand tokens each is a few
		// milliseconds, made side by side.
		done := make(chan struct{})
		go func() {
			defer close(done)
			set.samples[1] = sdk.Sample{Weights: set.kept.host[1], Inputs: c.RandomInputs(req, ms.opts.Seed)}
		}()
		set.samples[0] = sdk.Sample{Weights: set.kept.host[0], Inputs: c.PatternInputs(req)}
		<-done
		return set, nil
	}
	set.samples[0] = c.PatternSample(req)
	set.makeRandom = func() sdk.Sample { return c.RandomSample(req, ms.opts.Seed) }
	sizes := c.WeightSizes(req)
	var size int64
	for _, n := range sizes {
		size += n
	}
	if 2*size > ms.kept.limit {
		return set, nil
	}
	ms.kept.trim(ms.kept.limit - 2*size)
	k := &keptWeights{shape: shape, bytes: 2 * size} // its host copies are set as each sample is loaded
	for i := range k.dev {
		ms.work.Add(1)
		if k.dev[i], err = allocate(ms.dev, sizes); err != nil {
			ms.logger.Warn("sample weights not kept: no room on the device", "request", req.Key(), "error", err)
			k.free()
			return set, nil
		}
	}
	set.keep = k
	return set, nil
}

// load puts sample i's weights into the measurement's own weights: copied
// from the kept ones, else written from the host (and, when the layer is to
// be kept, copied from there into its kept set before any plugin sees
// them). Once both samples are loaded, a layer to be kept is kept. Copies
// complete before it returns (copyBuffers synchronises).
func (ms *measurer) load(set *sampleSet, i int, weights *bufferSet) error {
	if set.kept != nil {
		return copyBuffers(ms.dev, weights.bufs, set.kept.dev[i].bufs)
	}
	if err := weights.write(set.sample(i).Weights); err != nil {
		return err
	}
	if set.keep == nil {
		return nil
	}
	set.keep.host[i] = set.samples[i].Weights
	// Keeping is an optimisation: a copy that fails costs the next
	// measurement its shortcut, not this one its result.
	if err := copyBuffers(ms.dev, set.keep.dev[i].bufs, weights.bufs); err != nil {
		ms.logger.Warn("sample weights not kept: copying them failed", "error", err)
		set.discard()
		return nil
	}
	if i == len(set.samples)-1 {
		ms.kept.add(set.keep)
		set.keep = nil
	}
	return nil
}

// end waits for a random sample still being made (a measurement that
// ends early must not leave a layer's worth of host work running into the
// next one), then discards what was not kept.
func (set *sampleSet) end() {
	if set.random != nil {
		<-set.random
	}
	set.discard()
}

// discard frees a layer that was to be kept but was not loaded whole.
func (set *sampleSet) discard() {
	if set.keep != nil {
		set.keep.free()
		set.keep = nil
	}
}

// close frees what the measurer keeps on the device, and keeps nothing from
// then on.
func (ms *measurer) close() {
	ms.busy.Lock()
	defer ms.busy.Unlock()
	ms.kept.trim(0)
	ms.kept.limit = 0
}

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

// keptWeights are the device copies of one weight shape's two sample
// weights, the pattern sample's and the random sample's, kept from one
// measurement to the next. An engine tunes a layer at many token counts
// (decode, the representatives of prefill's token buckets, each count that
// shares a bucket's plan), and a sample's weights depend on the layer's
// shape and the seed, never on the count. A measurement at the kept shape
// makes and copies only its inputs: for a layer of 132 MB that saves
// making the weights on the host (about 30 ms) and copying them twice
// (17–24 ms each on the H200).
//
// One shape is kept, until a measurement of another shape or the host's
// Close: device memory for the layer's weights twice, or once where a
// second copy did not fit (the two samples then take turns in it). A
// candidate that writes into the weights it was handed would spoil the
// next measurement's samples; the fallback's check against the float64
// reference, computed from the host's copy, then fails, and the
// measurement drops the kept weights and checks again on fresh copies
// (examine).
type keptWeights struct {
	shape string
	host  [2]map[string][]byte
	// dev holds each sample's weights; dev[1] == dev[0] when a second set
	// did not fit.
	dev [2]*bufferSet
	// holds says which sample's weights a set holds now (absent: unknown).
	holds map[*bufferSet]int
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

// samples returns req's two samples, pattern then random, with their
// weights' device sets kept in ms.kept: the kept ones when req has the kept
// shape (reused; only the inputs are made), else made and allocated now in
// place of the old ones. The caller holds ms.busy.
func (ms *measurer) samples(c family.Contract, req sdk.Request) (samples [2]sdk.Sample, reused bool, err error) {
	shape := weightShape(req, ms.opts.Seed)
	if k := ms.kept; k != nil && k.shape == shape {
		samples[0] = sdk.Sample{Weights: k.host[0], Inputs: c.PatternInputs(req)}
		samples[1] = sdk.Sample{Weights: k.host[1], Inputs: c.RandomInputs(req, ms.opts.Seed)}
		return samples, true, nil
	}
	ms.dropKept()
	// The two samples are independent: build them side by side (for a
	// layer of 10^8 weights each is tens of milliseconds of host work).
	done := make(chan struct{})
	go func() {
		defer close(done)
		samples[1] = c.RandomSample(req, ms.opts.Seed)
	}()
	samples[0] = c.PatternSample(req)
	<-done
	k := &keptWeights{shape: shape, host: [2]map[string][]byte{samples[0].Weights, samples[1].Weights}, holds: map[*bufferSet]int{}}
	sizes := c.WeightSizes(req)
	ms.work.Add(1)
	if k.dev[0], err = allocate(ms.dev, sizes); err != nil {
		return samples, false, err
	}
	ms.work.Add(1)
	if k.dev[1], err = allocate(ms.dev, sizes); err != nil {
		ms.logger.Info("a second copy of the sample weights does not fit; the samples take turns in one", "request", req.Key(), "error", err)
		k.dev[1] = k.dev[0]
	}
	ms.kept = k
	return samples, false, nil
}

// dropKept frees the kept sample weights. The caller holds ms.busy.
func (ms *measurer) dropKept() {
	if ms.kept != nil {
		ms.kept.free()
		ms.kept = nil
	}
}

// close frees what the measurer keeps on the device.
func (ms *measurer) close() {
	ms.busy.Lock()
	defer ms.busy.Unlock()
	ms.dropKept()
}

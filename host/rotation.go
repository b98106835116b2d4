package host

import (
	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
)

// maxRotation bounds the weight copies a timing rotates through.
const maxRotation = 16

// rotation holds copies of a sample's weights so that timed iterations read
// weights that are not in L2: in an engine a layer's weights are evicted by
// the other layers between two calls, and timing them hot would flatter
// every candidate by a different amount.
type rotation struct {
	sets   []map[string]device.Buffer
	copies []*bufferSet
}

// newRotation makes enough copies of the weights that together with the
// original they exceed twice the device's L2 (none when the device reports
// no L2, or the weights alone are that large). Each set also binds the
// sample's inputs and outputs.
func (ms *measurer) newRotation(bufs *sampleBuffers) (*rotation, error) {
	io := bufs.ioBuffers()
	base := map[string]device.Buffer{}
	var weightBytes int64
	for k, v := range bufs.weights.bufs {
		base[k] = v
		weightBytes += v.Size()
	}
	for k, v := range io {
		base[k] = v
	}
	r := &rotation{sets: []map[string]device.Buffer{base}}
	l2 := ms.hw.L2Bytes
	if l2 <= 0 || weightBytes <= 0 || weightBytes >= 2*l2 {
		return r, nil
	}
	copies := min(int((2*l2+weightBytes-1)/weightBytes), maxRotation)
	sizes := map[string]int64{}
	for k, v := range bufs.weights.bufs {
		sizes[k] = v.Size()
	}
	for i := 1; i < copies; i++ {
		ms.work.Add(1)
		set, err := allocate(ms.dev, sizes)
		if err != nil {
			r.free()
			return nil, err
		}
		r.copies = append(r.copies, set)
		if err := copyBuffers(ms.dev, set.bufs, bufs.weights.bufs); err != nil {
			r.free()
			return nil, err
		}
		bind := map[string]device.Buffer{}
		for k, v := range io {
			bind[k] = v
		}
		for k, v := range set.bufs {
			bind[k] = v
		}
		r.sets = append(r.sets, bind)
	}
	return r, nil
}

func (r *rotation) free() {
	for _, c := range r.copies {
		c.free()
	}
	r.copies = nil
}

// exportedBatch is how many back-to-back launches one timing sample spans:
// an engine runs kernels back to back, and timing each launch between its
// own pair of events would add the launch latency to every sample.
const exportedBatch = 8

// timeExported times host launches of an exported candidate with the
// device's timer (CUDA events around batches of back-to-back launches),
// rotating weights; each sample is a batch's time over its launches.
func (ms *measurer) timeExported(r *run, rot *rotation, iterations int) (Timing, error) {
	timer := device.NewTimer(ms.dev)
	for i := 0; i < max(3, iterations/10); i++ {
		if err := r.exp.run(nil, rot.sets[i%len(rot.sets)]); err != nil {
			return Timing{}, err
		}
	}
	batches := max(5, iterations/exportedBatch)
	samples := make([]float64, 0, batches)
	next := 0
	for b := 0; b < batches; b++ {
		us, err := timer.Time(func() error {
			for i := 0; i < exportedBatch; i++ {
				if err := r.exp.run(nil, rot.sets[next%len(rot.sets)]); err != nil {
					return err
				}
				next++
			}
			return nil
		})
		if err != nil {
			return Timing{}, err
		}
		samples = append(samples, us/exportedBatch)
	}
	ms.work.Add(int64(batches * exportedBatch))
	return summarize(samples), nil
}

// copyBuffers copies each named buffer of src into dst: on the GPU, device
// to device; elsewhere through host memory.
func copyBuffers(dev device.Device, dst, src map[string]device.Buffer) error {
	for name, from := range src {
		to := dst[name]
		if cd, ok := dev.(*cuda.Device); ok {
			f, okf := from.(device.DeviceMemory)
			t, okt := to.(device.DeviceMemory)
			if okf && okt {
				if err := cd.Stream().CopyDevice(cuda.DevicePtr(t.DevicePointer()), cuda.DevicePtr(f.DevicePointer()), from.Size()); err != nil {
					return err
				}
				continue
			}
		}
		data := make([]byte, from.Size())
		if err := dev.Read(data, from, 0); err != nil {
			return err
		}
		if err := dev.Write(to, 0, data); err != nil {
			return err
		}
	}
	return dev.Synchronize()
}

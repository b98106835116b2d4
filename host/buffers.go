package host

import (
	"errors"

	"github.com/kcand/kcand/sdk/device"
)

// bufferSet is a group of named buffers the host owns on one device.
type bufferSet struct {
	dev  device.Device
	bufs map[string]device.Buffer
}

// allocate makes one buffer per entry of sizes; on failure it frees what it made.
func allocate(dev device.Device, sizes map[string]int64) (*bufferSet, error) {
	s := &bufferSet{dev: dev, bufs: map[string]device.Buffer{}}
	for _, name := range sortedNames(sizes) {
		b, err := dev.Alloc(sizes[name])
		if err != nil {
			s.free()
			return nil, err
		}
		s.bufs[name] = b
	}
	return s, nil
}

// write copies each named byte slice into its buffer.
func (s *bufferSet) write(data map[string][]byte) error {
	for name, bytes := range data {
		if b, ok := s.bufs[name]; ok {
			if err := s.dev.Write(b, 0, bytes); err != nil {
				return err
			}
		}
	}
	return nil
}

// fill sets every byte of every buffer to value.
func (s *bufferSet) fill(value byte) error {
	for _, b := range s.bufs {
		if err := s.dev.Fill(b, value); err != nil {
			return err
		}
	}
	return nil
}

// read copies every buffer out.
func (s *bufferSet) read() (map[string][]byte, error) {
	out := map[string][]byte{}
	for name, b := range s.bufs {
		data := make([]byte, b.Size())
		if err := s.dev.Read(data, b, 0); err != nil {
			return nil, err
		}
		out[name] = data
	}
	return out, nil
}

// handles exports every buffer.
func (s *bufferSet) handles() (map[string]device.Handle, error) {
	out := map[string]device.Handle{}
	for name, b := range s.bufs {
		h, err := b.Handle()
		if err != nil {
			return nil, err
		}
		out[name] = h
	}
	return out, nil
}

func (s *bufferSet) free() error {
	var errs []error
	for name, b := range s.bufs {
		errs = append(errs, s.dev.Free(b))
		delete(s.bufs, name)
	}
	return errors.Join(errs...)
}

// merge returns the union of handle maps; later maps win.
func merge(maps ...map[string]device.Handle) map[string]device.Handle {
	out := map[string]device.Handle{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

package spec

// Sample is one set of inputs for a request: the bytes of each weight and
// input binding, laid out as the family contract says, ready to copy into
// device buffers.
type Sample struct {
	Weights map[string][]byte
	Inputs  map[string][]byte
}

package cuda

import (
	"fmt"
	"testing"
)

func TestIsContextLost(t *testing.T) {
	if !IsContextLost(fmt.Errorf("execute: %w", &Error{Op: "cuStreamSynchronize", Code: ResultIllegalAddress})) {
		t.Error("an illegal address loses the context")
	}
	if IsContextLost(&Error{Op: "cuMemAlloc", Code: ResultOutOfMemory}) {
		t.Error("out of memory does not")
	}
	if IsContextLost(fmt.Errorf("plain")) {
		t.Error("a non-CUDA error does not")
	}
}

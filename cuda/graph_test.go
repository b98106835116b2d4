package cuda

import (
	"errors"
	"testing"

	"github.com/kcand/kcand/sdk/errdefs"
)

// TestGraphCallsRejectNilFirst needs no GPU: nil streams and graphs are
// invalid requests found before any driver call.
func TestGraphCallsRejectNilFirst(t *testing.T) {
	var (
		stream *Stream
		graph  *Graph
		exec   *GraphExec
	)
	tests := []struct {
		name string
		run  func() error
	}{
		{"begin capture on nil stream", func() error { return stream.BeginCapture(CaptureRelaxed) }},
		{"end capture on nil stream", func() error { _, err := stream.EndCapture(); return err }},
		{"instantiate nil graph", func() error { _, err := graph.Instantiate(); return err }},
		{"launch nil graph exec", func() error { return exec.Launch(stream) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); !errors.Is(err, errdefs.ErrInvalidRequest) {
				t.Fatalf("got %v, want an invalid request", err)
			}
		})
	}
	if err := errors.Join(graph.Destroy(), exec.Destroy()); err != nil {
		t.Fatalf("destroying nil graphs: %v", err)
	}
}

func TestCaptureModeNames(t *testing.T) {
	for mode, want := range map[CaptureMode]string{
		CaptureGlobal: "global", CaptureThreadLocal: "thread-local", CaptureRelaxed: "relaxed", 9: "CaptureMode(9)",
	} {
		if got := mode.String(); got != want {
			t.Errorf("%d is %q, want %q", int(mode), got, want)
		}
	}
}

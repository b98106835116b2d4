package main

import (
	"bufio"
	"fmt"
	"os"
	"time"

	"github.com/kcand/kcand/cuda"
)

// runChild plays the second process and returns its exit status; failures
// go back to the parent in the ready message.
func runChild(role string, ordinal int) int {
	p := &peer{in: bufio.NewReader(os.NewFile(3, "from-parent")), out: os.NewFile(4, "to-parent")}
	start := time.Now()
	d, err := cuda.NewDevice(ordinal)
	if err != nil {
		p.sendLine(readyMessage{Error: err.Error()})
		return 1
	}
	defer d.Close()
	newDevice := microseconds(time.Since(start))
	var setup setupMessage
	if err := p.readLine(&setup); err != nil {
		p.sendLine(readyMessage{Error: err.Error()})
		return 1
	}
	switch role {
	case "ipc-open":
		err = childIPCOpen(p, d, setup, newDevice)
	case "roundtrip":
		err = childRoundTrip(p, d, setup)
	default:
		err = fmt.Errorf("unknown child role %q", role)
	}
	if err != nil {
		p.sendLine(readyMessage{Error: err.Error()})
		return 1
	}
	return 0
}

// childIPCOpen opens every handle twice and forgets it, timing each step.
func childIPCOpen(p *peer, d *cuda.Device, setup setupMessage, newDevice float64) error {
	var open, cached, forget []float64
	for _, h := range setup.Handles {
		start := time.Now()
		if _, err := d.Open(h); err != nil {
			return err
		}
		open = append(open, microseconds(time.Since(start)))
		start = time.Now()
		if _, err := d.Open(h); err != nil {
			return err
		}
		cached = append(cached, microseconds(time.Since(start)))
	}
	for _, h := range setup.Handles {
		start := time.Now()
		if err := d.Forget(h.Owner, h.Allocation); err != nil {
			return err
		}
		forget = append(forget, microseconds(time.Since(start)))
	}
	if err := p.sendLine(readyMessage{NewDeviceUS: newDevice, OpenUS: median(open), CachedOpenUS: median(cached), ForgetUS: median(forget)}); err != nil {
		return err
	}
	p.in.ReadByte() // quit
	return nil
}

// childRoundTrip is the plugin side of the round trip: on each doorbell it
// orders its stream after the host's, adds 10, and answers.
func childRoundTrip(p *peer, d *cuda.Device, setup setupMessage) error {
	if len(setup.Handles) != 1 {
		return fmt.Errorf("want one handle, got %d", len(setup.Handles))
	}
	x, err := d.Open(setup.Handles[0])
	if err != nil {
		return err
	}
	hostHandle, err := cuda.ParseEventHandle(setup.Event)
	if err != nil {
		return err
	}
	hostEvent, err := d.OpenIPCEvent(hostHandle)
	if err != nil {
		return err
	}
	defer hostEvent.Destroy()
	mine, myHandle, err := d.NewIPCEvent()
	if err != nil {
		return err
	}
	defer mine.Destroy()
	add, err := loadKernel(d, setup.CacheDir, "kcand_add")
	if err != nil {
		return err
	}
	unlock, err := d.Context().LockThread()
	if err != nil {
		return err
	}
	defer unlock()
	if err := p.sendLine(readyMessage{Event: myHandle.String()}); err != nil {
		return err
	}
	stream, args := d.Stream(), cuda.NewArgs()
	for {
		bell, err := p.in.ReadByte()
		if err != nil || bell == ringQuit {
			return nil
		}
		if bell == ringEvents {
			if err := stream.Wait(hostEvent); err != nil {
				return err
			}
		}
		if err := add.Launch(stream, tinyKernel, args.Reset().Buffer(x).Uint32(10)); err != nil {
			return err
		}
		if bell == ringEvents {
			err = stream.Record(mine)
		} else {
			err = stream.Synchronize()
		}
		if err != nil {
			return err
		}
		if err := p.ring(ringDone); err != nil {
			return err
		}
	}
}

// loadKernel compiles (or finds in the cache) the bench source for d and
// returns one of its kernels.
func loadKernel(d *cuda.Device, cacheDir, name string) (*cuda.Function, error) {
	compiler, err := cuda.NewCompiler(cuda.WithKernelCacheDir(cacheDir))
	if err != nil {
		return nil, err
	}
	k, err := compiler.Compile(cuda.Source{Name: "cudabench.cu", Code: benchSource}, d.Info().ComputeCapability.Target(false))
	if err != nil {
		return nil, err
	}
	m, err := k.Load(d.Context())
	if err != nil {
		return nil, err
	}
	return m.Function(name)
}

func microseconds(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

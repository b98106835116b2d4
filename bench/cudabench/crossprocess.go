package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/kcand/kcand/cuda"
	"github.com/kcand/kcand/sdk/device"
)

// The second process is this binary run with -child=ROLE. The two talk
// over two pipes (the child's fds 3 and 4): JSON lines to set up, then
// single bytes per round trip, the cheapest doorbell a pipe offers.

// setupMessage is the parent's first line to a child.
type setupMessage struct {
	Handles  []device.Handle `json:"handles,omitempty"`
	Event    string          `json:"event,omitempty"`
	CacheDir string          `json:"cache_dir,omitempty"`
}

// readyMessage is a child's answer.
type readyMessage struct {
	Error          string  `json:"error,omitempty"`
	Event          string  `json:"event,omitempty"`
	NewDeviceUS    float64 `json:"new_device_us,omitempty"`
	OpenUS         float64 `json:"open_us,omitempty"`
	CachedOpenUS   float64 `json:"cached_open_us,omitempty"`
	ForgetUS       float64 `json:"forget_us,omitempty"`
	KernelLoadedUS float64 `json:"kernel_loaded_us,omitempty"`
}

// Round-trip doorbells.
const (
	ringEvents byte = 'e' // wait on the parent's event, add, record own event
	ringSync   byte = 's' // add, synchronise the stream, answer
	ringDone   byte = 'd'
	ringQuit   byte = 'q'
)

// peer is one end of the pipes.
type peer struct {
	in  *bufio.Reader
	out io.Writer
}

func (p *peer) sendLine(v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = p.out.Write(append(line, '\n'))
	return err
}

func (p *peer) readLine(v any) error {
	line, err := p.in.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("peer closed the pipe: %w", err)
	}
	return json.Unmarshal(line, v)
}

func (p *peer) ring(b byte) error {
	_, err := p.out.Write([]byte{b})
	return err
}

// child is a running second process.
type child struct {
	peer
	cmd *exec.Cmd
}

func startChild(role string, ordinal int) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	childIn, toChild, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	fromChild, childOut, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-child="+role, "-device="+strconv.Itoa(ordinal))
	cmd.ExtraFiles = []*os.File{childIn, childOut}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	childIn.Close()
	childOut.Close()
	return &child{peer: peer{in: bufio.NewReader(fromChild), out: toChild}, cmd: cmd}, nil
}

// ready reads the child's answer and turns a reported failure into an error.
func (c *child) ready() (readyMessage, error) {
	var msg readyMessage
	if err := c.readLine(&msg); err != nil {
		return msg, err
	}
	if msg.Error != "" {
		return msg, errors.New("child: " + msg.Error)
	}
	return msg, nil
}

// stop rings quit and waits for the child to exit.
func (c *child) stop() error {
	c.ring(ringQuit)
	c.out.(io.Closer).Close()
	return c.cmd.Wait()
}

// ipcOpenResult is what the IPC-open measurement reports.
type ipcOpenResult struct {
	childStartUS, openUS, cachedOpenUS, forgetUS float64
}

// measureIPCOpen exports count allocations and has a fresh process open
// each: the first Open maps it (cuIpcOpenMemHandle), the second hits the
// mapping cache, Forget unmaps it.
func measureIPCOpen(d *cuda.Device, count int, ordinal int) (ipcOpenResult, error) {
	var handles []device.Handle
	for range count {
		b, err := d.Alloc(2 << 20)
		if err != nil {
			return ipcOpenResult{}, err
		}
		defer d.Free(b)
		h, err := b.Handle()
		if err != nil {
			return ipcOpenResult{}, err
		}
		handles = append(handles, h)
	}
	c, err := startChild("ipc-open", ordinal)
	if err != nil {
		return ipcOpenResult{}, err
	}
	if err := c.sendLine(setupMessage{Handles: handles}); err != nil {
		return ipcOpenResult{}, err
	}
	msg, err := c.ready()
	if stopErr := c.stop(); err == nil {
		err = stopErr
	}
	return ipcOpenResult{msg.NewDeviceUS, msg.OpenUS, msg.CachedOpenUS, msg.ForgetUS}, err
}

// roundTripResult is what the cross-process measurement reports.
type roundTripResult struct {
	eventsLatencyUS, eventsPipelinedUS, syncLatencyUS float64
}

// measureRoundTrip orders host kernel → plugin kernel → host stream across
// two processes, iterations times per mode, and checks the arithmetic at
// the end: the host adds 1 and the child 10 per round trip.
func measureRoundTrip(d *cuda.Device, add *cuda.Function, cacheDir string, iterations, ordinal int) (roundTripResult, error) {
	var res roundTripResult
	x, err := d.Alloc(4)
	if err != nil {
		return res, err
	}
	defer d.Free(x)
	h, err := x.Handle()
	if err != nil {
		return res, err
	}
	hostEvent, hostHandle, err := d.NewIPCEvent()
	if err != nil {
		return res, err
	}
	defer hostEvent.Destroy()

	c, err := startChild("roundtrip", ordinal)
	if err != nil {
		return res, err
	}
	defer c.stop()
	if err := c.sendLine(setupMessage{Handles: []device.Handle{h}, Event: hostHandle.String(), CacheDir: cacheDir}); err != nil {
		return res, err
	}
	msg, err := c.ready()
	if err != nil {
		return res, err
	}
	childHandle, err := cuda.ParseEventHandle(msg.Event)
	if err != nil {
		return res, err
	}
	childEvent, err := d.OpenIPCEvent(childHandle)
	if err != nil {
		return res, err
	}
	defer childEvent.Destroy()

	unlock, err := d.Context().LockThread()
	if err != nil {
		return res, err
	}
	defer unlock()
	trip := &roundTrip{d: d, add: add, x: x, hostEvent: hostEvent, childEvent: childEvent, child: c, args: cuda.NewArgs()}
	// Warm up both processes' paths before timing.
	if _, err := trip.latency(ringEvents, 20); err != nil {
		return res, err
	}
	if res.eventsLatencyUS, err = trip.latency(ringEvents, iterations); err != nil {
		return res, err
	}
	if res.eventsPipelinedUS, err = trip.pipelined(iterations); err != nil {
		return res, err
	}
	if res.syncLatencyUS, err = trip.latency(ringSync, iterations); err != nil {
		return res, err
	}
	return res, trip.verify(uint32(11 * (20 + 3*iterations)))
}

type roundTrip struct {
	d                     *cuda.Device
	add                   *cuda.Function
	x                     device.Buffer
	hostEvent, childEvent *cuda.Event
	child                 *child
	args                  *cuda.Args
}

var tinyKernel = cuda.LaunchConfig{Grid: cuda.Dim3{X: 1}, Block: cuda.Dim3{X: 32}}

// send launches the host's kernel and hands over to the child; with events
// the child's stream waits on the host's, otherwise the host synchronises.
func (r *roundTrip) send(mode byte) error {
	stream := r.d.Stream()
	if err := r.add.Launch(stream, tinyKernel, r.args.Reset().Buffer(r.x).Uint32(1)); err != nil {
		return err
	}
	if mode == ringEvents {
		if err := stream.Record(r.hostEvent); err != nil {
			return err
		}
	} else if err := stream.Synchronize(); err != nil {
		return err
	}
	if err := r.child.ring(mode); err != nil {
		return err
	}
	answer, err := r.child.in.ReadByte()
	if err != nil {
		return fmt.Errorf("child hung up: %w", err)
	}
	if answer != ringDone {
		return fmt.Errorf("child answered %q", answer)
	}
	if mode == ringEvents {
		return stream.Wait(r.childEvent)
	}
	return nil
}

// latency is the median time from the host's launch to the host's stream
// having passed the child's kernel.
func (r *roundTrip) latency(mode byte, iterations int) (float64, error) {
	samples := make([]float64, 0, iterations)
	for range iterations {
		start := time.Now()
		if err := r.send(mode); err != nil {
			return 0, err
		}
		if err := r.d.Stream().Synchronize(); err != nil {
			return 0, err
		}
		samples = append(samples, float64(time.Since(start).Nanoseconds())/1e3)
	}
	return median(samples), nil
}

// pipelined lets round trips queue up and reports the mean time each took
// once the host's stream has drained.
func (r *roundTrip) pipelined(iterations int) (float64, error) {
	start := time.Now()
	for range iterations {
		if err := r.send(ringEvents); err != nil {
			return 0, err
		}
	}
	if err := r.d.Stream().Synchronize(); err != nil {
		return 0, err
	}
	return float64(time.Since(start).Nanoseconds()) / 1e3 / float64(iterations), nil
}

func (r *roundTrip) verify(want uint32) error {
	got := make([]byte, 4)
	if err := r.d.Read(got, r.x, 0); err != nil {
		return err
	}
	if v := uint32(got[0]) | uint32(got[1])<<8 | uint32(got[2])<<16 | uint32(got[3])<<24; v != want {
		return fmt.Errorf("round trip arithmetic: x = %d, want %d (kernels lost or misordered)", v, want)
	}
	return nil
}

package cuda

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/kcand/kcand/sdk/device"
)

// childMessage is one line of the parent–child protocol of the IPC tests.
type childMessage struct {
	Step   string         `json:"step,omitempty"`
	Error  string         `json:"error,omitempty"`
	Handle *device.Handle `json:"handle,omitempty"`
	Event  string         `json:"event,omitempty"` // EventHandle.String()
	Seed   uint32         `json:"seed,omitempty"`
}

// childLink is the child's end of the pipes: fd 3 in, fd 4 out.
type childLink struct {
	in  *bufio.Scanner
	out *os.File
}

func (l *childLink) receive() (childMessage, error) {
	var msg childMessage
	if !l.in.Scan() {
		return msg, fmt.Errorf("parent closed the pipe: %v", l.in.Err())
	}
	return msg, json.Unmarshal(l.in.Bytes(), &msg)
}

func (l *childLink) send(msg childMessage) {
	line, _ := json.Marshal(msg)
	l.out.Write(append(line, '\n'))
}

// expect reads the next message and checks its step.
func (l *childLink) expect(step string) (childMessage, error) {
	msg, err := l.receive()
	if err == nil && msg.Step != step {
		err = fmt.Errorf("expected step %q, got %q", step, msg.Step)
	}
	return msg, err
}

// runChild plays the second process of an IPC test and returns the exit
// status. Failures go back to the parent as an error message, so the
// parent's test fails with the child's reason.
func runChild(role string) int {
	link := &childLink{in: bufio.NewScanner(os.NewFile(3, "from-parent")), out: os.NewFile(4, "to-parent")}
	link.in.Buffer(make([]byte, 1<<16), 1<<20)
	roles := map[string]func(*childLink, *Device) error{
		"fill":   childFill,
		"events": childEvents,
	}
	play, ok := roles[role]
	if !ok {
		link.send(childMessage{Error: "unknown child role " + role})
		return 2
	}
	d, err := NewDevice(0)
	if err == nil {
		err = play(link, d)
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		link.send(childMessage{Error: fmt.Sprintf("%s: %v", role, err)})
		return 1
	}
	return 0
}

// childFill opens the parent's buffer (twice, to check the mapping cache),
// fills it with kcand_fill, forgets the mapping, and waits to be dismissed.
func childFill(link *childLink, d *Device) error {
	msg, err := link.expect("fill")
	if err != nil {
		return err
	}
	b, err := d.Open(*msg.Handle)
	if err != nil {
		return err
	}
	again, err := d.Open(*msg.Handle)
	if err != nil {
		return err
	}
	if b.(device.DeviceMemory).DevicePointer() != again.(device.DeviceMemory).DevicePointer() {
		return fmt.Errorf("second Open mapped the allocation again")
	}
	if _, err := d.Open(device.Handle{Kind: device.CUDA, Owner: os.Getpid(), Allocation: 1, AllocationSize: 8, Token: make([]byte, 64), Size: 8}); err == nil {
		return fmt.Errorf("Open of a handle naming this process succeeded")
	}
	m, err := d.Context().LoadModule(testKernelPTX)
	if err != nil {
		return err
	}
	defer m.Unload()
	fill, err := m.Function("kcand_fill")
	if err != nil {
		return err
	}
	n := int(b.Size() / 4)
	args := NewArgs().Buffer(b).Uint32(uint32(n)).Uint32(msg.Seed)
	cfg := LaunchConfig{Grid: Dim3{X: (n + 255) / 256}, Block: Dim3{X: 256}}
	if err := fill.Launch(d.Stream(), cfg, args); err != nil {
		return err
	}
	if err := d.Synchronize(); err != nil {
		return err
	}
	if err := d.Forget(msg.Handle.Owner, msg.Handle.Allocation); err != nil {
		return err
	}
	if b.(device.DeviceMemory).DevicePointer() != 0 {
		return fmt.Errorf("buffer still has an address after Forget")
	}
	link.send(childMessage{Step: "filled"})
	_, err = link.expect("exit")
	return err
}

// childEvents is the middle of an ordered chain: it waits on the parent's
// interprocess event, runs x = x*3+1 after a 50 ms spin, and records its
// own event for the parent to wait on.
func childEvents(link *childLink, d *Device) error {
	msg, err := link.expect("setup")
	if err != nil {
		return err
	}
	parentHandle, err := ParseEventHandle(msg.Event)
	if err != nil {
		return err
	}
	parentEvent, err := d.OpenIPCEvent(parentHandle)
	if err != nil {
		return err
	}
	defer parentEvent.Destroy()
	mine, myHandle, err := d.NewIPCEvent()
	if err != nil {
		return err
	}
	defer mine.Destroy()
	x, err := d.Open(*msg.Handle)
	if err != nil {
		return err
	}
	m, err := d.Context().LoadModule(testKernelPTX)
	if err != nil {
		return err
	}
	defer m.Unload()
	spin, err := m.Function("kcand_spin_affine")
	if err != nil {
		return err
	}
	link.send(childMessage{Step: "ready", Event: myHandle.String()})

	if _, err := link.expect("go"); err != nil {
		return err
	}
	stream := d.Stream()
	if err := stream.Wait(parentEvent); err != nil {
		return err
	}
	args := NewArgs().Buffer(x).Uint64(uint64(50e6)).Uint32(3).Uint32(1)
	if err := spin.Launch(stream, LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 1}}, args); err != nil {
		return err
	}
	if err := stream.Record(mine); err != nil {
		return err
	}
	link.send(childMessage{Step: "recorded"})
	// Stay alive, event and mapping included, until the parent has waited.
	_, err = link.expect("exit")
	return err
}

package cuda

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// The test kernels: testdata/kernels.cu, and the PTX nvcc 11.8 made of it
// (nvcc -ptx -arch=compute_80 testdata/kernels.cu -o testdata/kernels.ptx),
// which every driver since 11.8 compiles for its GPU. Embedding them keeps
// a test binary built with go test -c self-contained on the GPU machine.
var (
	//go:embed testdata/kernels.cu
	testKernelSource string
	//go:embed testdata/kernels.ptx
	testKernelPTX []byte
)

// childRoleEnv makes the test binary act as the second process of an IPC
// test instead of running tests.
const childRoleEnv = "KCAND_CUDA_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childRoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// requireDevice opens GPU 0 or skips the test, saying why.
func requireDevice(t *testing.T) *Device {
	t.Helper()
	d, err := NewDevice(0)
	if errors.Is(err, ErrNoDriver) {
		t.Skipf("needs a CUDA GPU: %v", err)
	}
	if err != nil {
		t.Fatalf("NewDevice(0): %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close device: %v", err)
		}
	})
	return d
}

// loadTestKernels loads the embedded PTX into d's context.
func loadTestKernels(t *testing.T, d *Device) *Module {
	t.Helper()
	m, err := d.Context().LoadModule(testKernelPTX)
	if err != nil {
		t.Fatalf("load test kernels: %v", err)
	}
	t.Cleanup(func() { m.Unload() })
	return m
}

func testFunction(t *testing.T, m *Module, name string) *Function {
	t.Helper()
	f, err := m.Function(name)
	if err != nil {
		t.Fatalf("function %s: %v", name, err)
	}
	return f
}

// childProcess is the test binary re-executed in a role, talking JSON lines
// over two pipes (its fds 3 and 4), so nothing the test framework prints
// can interleave with the protocol.
type childProcess struct {
	cmd     *exec.Cmd
	toChild *os.File
	replies *bufio.Scanner
	exited  chan struct{} // closed when the child has exited
	exitErr error
}

func startChild(t *testing.T, role string) *childProcess {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	childIn, toChild, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromChild, childOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childRoleEnv+"="+role)
	cmd.ExtraFiles = []*os.File{childIn, childOut}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", role, err)
	}
	childIn.Close()
	childOut.Close()
	c := &childProcess{cmd: cmd, toChild: toChild, replies: bufio.NewScanner(fromChild), exited: make(chan struct{})}
	c.replies.Buffer(make([]byte, 1<<16), 1<<20)
	go func() {
		c.exitErr = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		toChild.Close()
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-c.exited
		}
		fromChild.Close()
	})
	return c
}

func (c *childProcess) send(t *testing.T, msg childMessage) {
	t.Helper()
	line, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.toChild.Write(append(line, '\n')); err != nil {
		t.Fatalf("send to child: %v", err)
	}
}

func (c *childProcess) receive(t *testing.T) childMessage {
	t.Helper()
	lines := make(chan childMessage, 1)
	go func() {
		var msg childMessage
		if !c.replies.Scan() {
			msg.Error = fmt.Sprintf("child closed its pipe: %v", c.replies.Err())
		} else if err := json.Unmarshal(c.replies.Bytes(), &msg); err != nil {
			msg.Error = fmt.Sprintf("bad reply %q: %v", c.replies.Text(), err)
		}
		lines <- msg
	}()
	select {
	case msg := <-lines:
		if msg.Error != "" {
			t.Fatalf("child: %s", msg.Error)
		}
		return msg
	case <-time.After(60 * time.Second):
		t.Fatal("child did not answer within 60 s")
	}
	return childMessage{}
}

// finish tells the child to exit and checks that it succeeded.
func (c *childProcess) finish(t *testing.T) {
	t.Helper()
	c.send(t, childMessage{Step: "exit"})
	c.toChild.Close()
	select {
	case <-c.exited:
		if c.exitErr != nil {
			t.Fatalf("child failed: %v", c.exitErr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("child did not exit within 60 s")
	}
}

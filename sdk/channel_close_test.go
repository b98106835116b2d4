package sdk

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/device/cpu"
	"github.com/kcand/kcand/sdk/doorbell"
)

// pageSpy is forgetSpy whose Open maps every handle to memory of this
// process, so a doorbell page needs no second process: the test holds the
// page's other side.
type pageSpy struct {
	*forgetSpy
	pages map[uint64]device.Buffer
	// forgotAtClose lists, when the device was closed, which pages had
	// been forgotten by then.
	forgotAtClose map[uint64]bool
}

func (p *pageSpy) Close() error {
	p.forgotAtClose = map[uint64]bool{}
	for id := range p.pages {
		p.forgotAtClose[id] = p.forgotten(id)
	}
	return p.forgetSpy.Close()
}

func (p *pageSpy) Open(h device.Handle) (device.Buffer, error) {
	if b, ok := p.pages[h.Allocation]; ok {
		return b, nil
	}
	return p.forgetSpy.Open(h)
}

// channelRuntime is a runtime on pageSpy, and a doorbell page it will map
// for allocation id.
func channelRuntime(t *testing.T, id uint64) (*Runtime, *pageSpy, device.Handle, []byte) {
	t.Helper()
	spy := &pageSpy{forgetSpy: &forgetSpy{Device: cpu.New()}, pages: map[uint64]device.Buffer{}}
	saved := deviceOpeners[device.CPU]
	t.Cleanup(func() { deviceOpeners[device.CPU] = saved })
	RegisterDevice(device.CPU, func() (device.Device, error) { return spy, nil })
	r, err := NewRuntime("channels", "test", nil, cpuOnly{})
	require.NoError(t, err)
	page, err := spy.Device.Alloc(doorbell.PageBytes)
	require.NoError(t, err)
	spy.pages[id] = page
	h := device.Handle{Kind: device.CPU, Owner: 1, Allocation: id, AllocationSize: doorbell.PageBytes, Size: doorbell.PageBytes}
	return r, spy, h, page.(device.HostMemory).Bytes()
}

func (f *forgetSpy) forgotten(id uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, got := range f.forgot {
		if got == id {
			return true
		}
	}
	return false
}

// TestCloseEndsItsChannelsAndUnmapsTheirPagesBeforeItClosesTheDevices: a
// channel serves from a goroutine of its own; Close must not close the
// devices (nor return) while that goroutine still holds the page.
func TestCloseEndsItsChannelsAndUnmapsTheirPagesBeforeItClosesTheDevices(t *testing.T) {
	r, spy, h, mem := channelRuntime(t, 11)
	require.NoError(t, r.OpenChannel(context.Background(), ChannelRequest{Page: h}))
	client, err := doorbell.NewClient(mem)
	require.NoError(t, err)
	resp, err := client.Call([]byte("not a request"), time.Now().Add(5*time.Second), func() error { return nil })
	require.NoError(t, err, "the channel serves")
	assert.NotEmpty(t, resp, "an undecodable request gets an error response")
	assert.False(t, spy.forgotten(11), "the page stays mapped while the channel is open")
	require.NoError(t, r.Close())
	assert.True(t, spy.forgotAtClose[11], "Close closed the device before the channel unmapped its page")
}

// TestAChannelOpenedWhileClosingIsRefusedAndItsPageUnmapped: Close waits
// only for the channels that started before it; one asked for after that
// must not start, nor leave its page mapped.
func TestAChannelOpenedWhileClosingIsRefusedAndItsPageUnmapped(t *testing.T) {
	r, spy, h, _ := channelRuntime(t, 12)
	defer r.Close()
	r.closing.Store(true) // as Close does first
	err := r.OpenChannel(context.Background(), ChannelRequest{Page: h})
	assert.ErrorIs(t, err, ErrUnavailable)
	assert.Contains(t, err.Error(), "closing")
	assert.True(t, spy.forgotten(12), "the refused channel's page is unmapped")
}

package doorbell

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sharedPage(t *testing.T) []byte {
	mem, err := syscall.Mmap(-1, 0, PageBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANON)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Munmap(mem) })
	return mem
}

func TestCallsAreAnsweredInOrder(t *testing.T) {
	mem := sharedPage(t)
	c, err := NewClient(mem)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		done <- Serve(mem, func(req []byte) []byte { return append([]byte("re:"), req...) }, nil)
	}()
	for i := 0; i < 1000; i++ {
		msg := []byte{byte(i), byte(i >> 8)}
		got, err := c.Call(msg, time.Now().Add(5*time.Second), nil)
		require.NoError(t, err)
		require.Equal(t, append([]byte("re:"), msg...), got)
	}
	c.Close()
	assert.ErrorIs(t, <-done, ErrClosed)
}

func TestDeadAndSilentServers(t *testing.T) {
	mem := sharedPage(t)
	c, err := NewClient(mem)
	require.NoError(t, err)
	_, err = c.Call([]byte("x"), time.Now().Add(20*time.Millisecond), nil)
	assert.ErrorIs(t, err, ErrDeadline, "nobody answers")
	died := errors.New("plugin died")
	_, err = c.Call([]byte("x"), time.Time{}, func() error { return died })
	assert.ErrorIs(t, err, died, "the liveness check ends the wait")
	_, err = c.Call(make([]byte, RegionBytes+1), time.Time{}, nil)
	assert.ErrorIs(t, err, ErrTooLarge)
}

func BenchmarkRoundTrip(b *testing.B) {
	mem, _ := syscall.Mmap(-1, 0, PageBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANON)
	defer syscall.Munmap(mem)
	c, _ := NewClient(mem)
	go Serve(mem, func(req []byte) []byte { return req }, nil)
	msg := make([]byte, 256)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Call(msg, time.Time{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
}

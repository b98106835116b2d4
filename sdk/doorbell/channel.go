package doorbell

import (
	"sync"
	"sync/atomic"
	"time"
)

// Client is the host's end: one call at a time.
type Client struct {
	mu   sync.Mutex
	p    page
	seq  uint32
	resp []byte
}

// NewClient uses mem (PageBytes of shared memory, zeroed) as a channel.
func NewClient(mem []byte) (*Client, error) {
	p, err := newPage(mem)
	if err != nil {
		return nil, err
	}
	return &Client{p: p, resp: make([]byte, 0, RegionBytes)}, nil
}

// Call sends req and waits for the answer until deadline (zero: none);
// alive is consulted while waiting and may end the wait with its error
// (the plugin died). The returned slice is valid until the next Call.
func (c *Client) Call(req []byte, deadline time.Time, alive func() error) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.p.put(offRequestLen, offRequest, req); err != nil {
		return nil, err
	}
	c.seq++
	c.p.ring(offRequestSeq, c.seq)
	// Wait until the response sequence reaches ours; a late answer to an
	// earlier call that timed out moves it without ending the wait.
	seen := atomic.LoadUint32(c.p.word(offResponseSeq))
	for seen != c.seq {
		var err error
		if seen, err = c.p.wait(offResponseSeq, seen, deadline, alive); err != nil {
			return nil, err
		}
	}
	return c.p.get(offResponseLen, offResponse, c.resp)
}

// Close tells the server to stop.
func (c *Client) Close() { c.p.close() }

// Serve answers requests on mem with handle until the client closes the
// channel or stop returns an error. It runs on the caller's goroutine.
func Serve(mem []byte, handle func(req []byte) []byte, stop func() error) error {
	p, err := newPage(mem)
	if err != nil {
		return err
	}
	var seen uint32
	buf := make([]byte, 0, RegionBytes)
	for {
		seq, err := p.wait(offRequestSeq, seen, time.Time{}, stop)
		if err != nil {
			return err
		}
		req, err := p.get(offRequestLen, offRequest, buf)
		if err != nil {
			return err
		}
		resp := handle(req)
		if err := p.put(offResponseLen, offResponse, resp); err != nil {
			p.put(offResponseLen, offResponse, nil)
		}
		seen = seq
		p.ring(offResponseSeq, seq)
	}
}

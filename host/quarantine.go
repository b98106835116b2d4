package host

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Quarantine defaults: a candidate that fails this many times in a row is
// refused for this long.
const (
	defaultQuarantineAfter = 3
	defaultQuarantineFor   = 10 * time.Minute
)

// quarantine counts each candidate's consecutive failures and refuses a
// candidate that fails too often, for a while. Fallbacks are never
// quarantined: nothing would be left to serve their family.
type quarantine struct {
	after  int
	period time.Duration
	logger hclog.Logger

	mu    sync.Mutex
	state map[string]*candidateHealth
}

type candidateHealth struct {
	failures int
	until    time.Time
	last     string
}

func newQuarantine(after int, period time.Duration, logger hclog.Logger) *quarantine {
	if after <= 0 {
		after = defaultQuarantineAfter
	}
	if period <= 0 {
		period = defaultQuarantineFor
	}
	return &quarantine{after: after, period: period, logger: logger, state: map[string]*candidateHealth{}}
}

// failed records a failure and reports whether the candidate is now quarantined.
func (q *quarantine) failed(candidate string, fallback bool, err error) bool {
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.state[candidate]
	if s == nil {
		s = &candidateHealth{}
		q.state[candidate] = s
	}
	s.failures++
	s.last = err.Error()
	if fallback || s.failures < q.after {
		return false
	}
	if time.Now().After(s.until) {
		s.until = time.Now().Add(q.period)
		q.logger.Error("candidate quarantined", "candidate", candidate, "failures", s.failures, "until", s.until.Format(time.RFC3339), "last_error", s.last)
	}
	return true
}

// succeeded resets a candidate's failure count.
func (q *quarantine) succeeded(candidate string) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if s := q.state[candidate]; s != nil && time.Now().After(s.until) {
		s.failures = 0
	}
}

// refuses says whether a candidate is quarantined now, and why.
func (q *quarantine) refuses(candidate string) (bool, string) {
	if q == nil {
		return false, ""
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.state[candidate]
	if s == nil || time.Now().After(s.until) {
		return false, ""
	}
	return true, fmt.Sprintf("quarantined until %s after %d consecutive failures; last: %s", s.until.Format(time.RFC3339), s.failures, s.last)
}

package device

import "time"

// Timer measures the device time of a piece of work.
type Timer interface {
	// Time runs work and returns the device time it took in microseconds.
	Time(work func() error) (float64, error)
}

// TimerSource is implemented by devices with their own timing (CUDA events).
type TimerSource interface {
	NewTimer() Timer
}

// NewTimer returns d's own timer, or a wall-clock timer that synchronises
// the device around the work.
func NewTimer(d Device) Timer {
	if ts, ok := d.(TimerSource); ok {
		return ts.NewTimer()
	}
	return wallTimer{d}
}

type wallTimer struct{ d Device }

func (t wallTimer) Time(work func() error) (float64, error) {
	if err := t.d.Synchronize(); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := work(); err != nil {
		return 0, err
	}
	if err := t.d.Synchronize(); err != nil {
		return 0, err
	}
	return float64(time.Since(start).Nanoseconds()) / 1e3, nil
}

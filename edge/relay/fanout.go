package relay

import (
	"sync"
	"time"
)

// fanout measures how long the relay takes to send a change to every edge watching: from
// the change's arrival (Snapshots publishing it) to the slowest stream's send. The relay asks
// its edges to wait at least that long before acknowledging (ack_delay_ms), so that their
// calls do not compete with the change still being sent to the others. The control plane
// estimates the same wait from its number of streams (40 µs each, one core's cost); a relay
// measures it, because the edges behind it are what it shares its cores with: 2,500 edges
// behind each of two relays on two cores took 550 ms, not 100, and their acknowledgements,
// arriving from 100 ms on, doubled the time the change took to reach the last edges.
type fanout struct {
	mu      sync.Mutex
	at      time.Time     // the newest change being sent
	current time.Duration // its slowest send so far
	last    time.Duration // the slowest send of the change before it
}

// sent records a stream's send of the change that arrived at at, done now.
func (f *fanout) sent(at time.Time) {
	took := time.Since(at)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case at.After(f.at): // the first send of a newer change: the one before is complete
		f.at, f.last, f.current = at, f.current, took
	case at.Equal(f.at):
		f.current = max(f.current, took)
	default: // a slow stream still sending the change before
		f.last = max(f.last, took)
	}
}

// took returns how long sending a change to every edge takes now: the longer of the last
// change's and the one being sent.
func (f *fanout) took() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(f.last, f.current)
}

package relay

import (
	"testing"
	"time"
)

// TestFanoutTakesTheSlowestSend: the measure is the slowest stream's send of the newest
// change, or of the change before when that was slower; a slow stream still sending an older
// change counts towards the change before. The changes are seconds apart, so that the test's
// own time between its steps (on a loaded machine, a good part of a second) cannot move a
// measure across a bound.
func TestFanoutTakesTheSlowestSend(t *testing.T) {
	var f fanout
	if got := f.took(); got != 0 {
		t.Fatalf("before any change: %v", got)
	}
	first := time.Now().Add(-3 * time.Second)
	f.sent(first)
	f.sent(first.Add(2 * time.Second)) // a later change, sent at once
	if got := f.took(); got < 3*time.Second {
		t.Errorf("after a change that took 3 s: %v", got)
	}
	second := time.Now().Add(-500 * time.Millisecond)
	f.sent(second) // the first change is complete: the one after it is newer
	f.sent(second)
	if got := f.took(); got < time.Second || got >= 3*time.Second {
		t.Errorf("two changes on: %v, want the 1 s of the one before the newest", got)
	}
	f.sent(second.Add(-10 * time.Second)) // a stream still sending an older change
	if got := f.took(); got < 10*time.Second {
		t.Errorf("with a stream ten seconds late: %v", got)
	}
}

package relay

import (
	"testing"
	"time"
)

// TestFanoutTakesTheSlowestSend: the measure is the slowest stream's send of the newest
// change, or of the change before when that was slower; a slow stream still sending an older
// change counts towards the change before.
func TestFanoutTakesTheSlowestSend(t *testing.T) {
	var f fanout
	if got := f.took(); got != 0 {
		t.Fatalf("before any change: %v", got)
	}
	first := time.Now().Add(-300 * time.Millisecond)
	f.sent(first)
	f.sent(first.Add(200 * time.Millisecond)) // a later change, sent at once
	if got := f.took(); got < 300*time.Millisecond {
		t.Errorf("after a change that took 300 ms: %v", got)
	}
	second := time.Now().Add(-50 * time.Millisecond)
	f.sent(second) // the first change is complete: the one after it is newer
	f.sent(second)
	if got := f.took(); got < 100*time.Millisecond || got >= 300*time.Millisecond {
		t.Errorf("two changes on: %v, want the 100 ms of the one before the newest", got)
	}
	f.sent(second.Add(-time.Second)) // a stream still sending an older change
	if got := f.took(); got < time.Second {
		t.Errorf("with a stream a second late: %v", got)
	}
}

package backoff

import (
	"context"
	"testing"
	"time"
)

func TestNextDoublesWithJitterUpToMax(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for i, base := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		base *= time.Millisecond
		d := b.Next()
		if d < base/2 || d >= base*3/2 {
			t.Fatalf("attempt %d: delay %v outside [%v, %v)", i, d, base/2, base*3/2)
		}
	}
	b.Reset()
	if d := b.Next(); d >= 150*time.Millisecond {
		t.Fatalf("after Reset: %v, want < 150ms", d)
	}
}

// stepClock fires every wait at once and records what was asked.
type stepClock struct{ asked []time.Duration }

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.asked = append(c.asked, d)
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

func TestWaitUsesTheClockAndStopsOnCancel(t *testing.T) {
	clock := &stepClock{}
	b := Backoff{Initial: time.Hour, Max: time.Hour}
	if !b.Wait(context.Background(), clock) {
		t.Fatal("Wait on a live context reported false")
	}
	if len(clock.asked) != 1 || clock.asked[0] < 30*time.Minute {
		t.Fatalf("clock asked %v", clock.asked)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	never := Backoff{Initial: time.Hour, Max: time.Hour}
	start := time.Now()
	if never.Wait(ctx, RealClock) {
		t.Fatal("Wait on a cancelled context reported true")
	}
	if time.Since(start) > 30*time.Second { // one that ignored the cancel would wait the hour
		t.Fatal("Wait did not return at once on cancel")
	}
}

// TestSleepStopsWithItsContext: Sleep waits out its delay, and returns false at once when the
// context ends first or has ended.
func TestSleepStopsWithItsContext(t *testing.T) {
	start := time.Now()
	if !Sleep(context.Background(), 20*time.Millisecond) || time.Since(start) < 20*time.Millisecond {
		t.Fatal("Sleep did not wait out its delay")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	start = time.Now()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep outlived its context")
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("Sleep ended %v after its context", d)
	}
	if Sleep(ctx, 0) || Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on an ended context reported true")
	}
}

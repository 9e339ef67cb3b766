// Package backoff is the one retry delay of both programs: jittered exponential backoff with a
// cap, and a wait on a clock that tests can drive without sleeping.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff yields delays that double from Initial up to Max. Each delay is drawn uniformly from
// [d/2, 3d/2) so that many clients that failed together (edges after a control-plane restart)
// do not retry in step. The zero value is not usable: set Initial and Max.
type Backoff struct {
	Initial, Max time.Duration
	next         time.Duration
}

// Next returns the delay before the next attempt and doubles the one after, up to Max.
func (b *Backoff) Next() time.Duration {
	if b.next == 0 {
		b.next = b.Initial
	}
	d := b.next
	b.next = min(2*b.next, b.Max)
	return d/2 + time.Duration(rand.Int64N(int64(d)))
}

// Reset starts again from Initial, after a success.
func (b *Backoff) Reset() { b.next = 0 }

// Clock is what a wait needs of time; RealClock is the wall clock.
type Clock interface {
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// RealClock waits on the wall clock.
var RealClock Clock = realClock{}

// Wait waits for b's next delay on clock; it reports false, at once, when ctx ends first.
func (b *Backoff) Wait(ctx context.Context, clock Clock) bool {
	select {
	case <-ctx.Done():
		return false
	case <-clock.After(b.Next()):
		return true
	}
}

// Sleep waits for d, or less if ctx ends first (false then, at once): the pause of a loop that
// must stop with its context, with the timer released either way.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

package reqbody

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// ErrBusy reports that the edge's in-flight memory budget stayed spent for the whole wait:
// the request is answered 503 with Retry-After, which SDKs retry.
var ErrBusy = errors.New("in-flight memory budget spent")

// BudgetWait is how long a request waits for the budget before it is refused: long enough
// for a few large batches ahead of it to finish (a 20 MB batch takes about 100 ms), short
// enough that a client is not held past its own timeout.
const BudgetWait = time.Second

// Budget bounds the bytes that all requests in flight hold for their bodies and what
// decoding and parsing them costs: a process-wide semaphore of bytes. A nil *Budget is
// unbounded.
type Budget struct {
	sem  *semaphore.Weighted
	size int64
	held atomic.Int64
}

// NewBudget returns a budget of size bytes; size <= 0 means unbounded (nil).
func NewBudget(size int64) *Budget {
	if size <= 0 {
		return nil
	}
	return &Budget{sem: semaphore.NewWeighted(size), size: size}
}

// Held returns the bytes held now, for the metrics.
func (b *Budget) Held() int64 {
	if b == nil {
		return 0
	}
	return b.held.Load()
}

// Size returns the budget's size in bytes; 0 when unbounded.
func (b *Budget) Size() int64 {
	if b == nil {
		return 0
	}
	return b.size
}

// Lease is what one request holds of a budget; Release gives it back when the request is
// answered. The zero Lease, and one of a nil budget, reserve nothing.
type Lease struct {
	b *Budget
	n int64
}

// Lease starts a request's lease.
func (b *Budget) Lease() Lease { return Lease{b: b} }

// Reserve takes n more bytes for the request, waiting up to BudgetWait; it returns ErrBusy
// when they could not be had. A request never holds more than the whole budget: what it
// asks beyond that is granted without waiting, so that any request the limits allow can run,
// alone if it must.
func (l *Lease) Reserve(n int) error {
	if l.b == nil || n <= 0 {
		return nil
	}
	take := min(int64(n), l.b.size-l.n)
	if take <= 0 {
		return nil
	}
	if !l.b.sem.TryAcquire(take) {
		ctx, cancel := context.WithTimeout(context.Background(), BudgetWait)
		err := l.b.sem.Acquire(ctx, take)
		cancel()
		if err != nil {
			return ErrBusy
		}
	}
	l.n += take
	l.b.held.Add(take)
	return nil
}

// Release gives back all the lease holds; it may be called again.
func (l *Lease) Release() {
	if l.b == nil || l.n == 0 {
		return
	}
	l.b.sem.Release(l.n)
	l.b.held.Add(-l.n)
	l.n = 0
}

package syncserver

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestFreshReadsShareOnlyLaterReads: callers arriving while a read is under way share the
// next read, never the one under way (it may predate what they must see), and one read
// serves all of them.
func TestFreshReadsShareOnlyLaterReads(t *testing.T) {
	var calls atomic.Int64
	release := make(chan struct{})
	f := &freshReads{read: func(context.Context) (map[int64]int64, error) {
		n := calls.Add(1)
		if n == 1 {
			<-release
		}
		return map[int64]int64{1: n}, nil
	}}
	ctx := context.Background()
	first := make(chan int64)
	go func() {
		v, _ := f.get(ctx)
		first <- v[1]
	}()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	later := make([]int64, 50)
	for i := range later {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := f.get(ctx)
			if err != nil {
				t.Error(err)
			}
			later[i] = v[1]
		}()
	}
	time.Sleep(50 * time.Millisecond) // the later callers are queued behind the first read
	close(release)
	wg.Wait()
	if got := <-first; got != 1 {
		t.Fatalf("the first caller got read %d, want 1", got)
	}
	for i, v := range later {
		if v != 2 {
			t.Fatalf("caller %d that came during read 1 got read %d, want 2", i, v)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d reads for 51 callers, want 2", n)
	}
}

// TestFreshReadsCallerGoesAway: a caller whose context ends stops waiting; the read goes on
// for the others.
func TestFreshReadsCallerGoesAway(t *testing.T) {
	release := make(chan struct{})
	f := &freshReads{read: func(context.Context) (map[int64]int64, error) {
		<-release
		return map[int64]int64{1: 1}, nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := f.get(ctx)
		done <- err
	}()
	other := make(chan map[int64]int64)
	go func() {
		v, _ := f.get(context.Background())
		other <- v
	}()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled caller got no error")
	}
	close(release)
	if v := <-other; v[1] != 1 {
		t.Fatalf("the other caller got %v", v)
	}
}

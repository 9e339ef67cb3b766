package syncserver

import (
	"context"
	"runtime"
	"strings"
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
	waitJoined(t, 1+len(later)) // the later callers are queued behind the first read
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

// waitJoined waits until n goroutines wait in freshReads.get for a read (blocked in its
// select, so past the lock where a caller joins one): a fixed sleep let a caller that the
// scheduler had not yet run on a loaded machine arrive after the read it was meant to join.
func waitJoined(t *testing.T, n int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		waiting := 0
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, " [select") && strings.Contains(g, "(*freshReads).get(") {
				waiting++
			}
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d callers wait for a read, want %d", waiting, n)
		}
	}
}

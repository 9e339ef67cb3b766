package syncserver

import (
	"context"
	"sync"
)

// freshReads shares one read of the project versions between the streams that ask at the
// same time: when a whole fleet reconnects, thousands of catch-ups need them within a second.
// A caller must see every version committed before it asked, so it never joins a read
// already under way (which may have read before that): it joins the next one, which starts
// as soon as the one under way ends.
type freshReads struct {
	read func(context.Context) (map[int64]int64, error)

	mu      sync.Mutex
	next    *versionsRead // the read callers join now; nil: none queued
	running bool
}

// versionsRead is one read, shared by its callers: versions is never changed.
type versionsRead struct {
	done     chan struct{}
	versions map[int64]int64
	err      error
}

// get returns the versions as of a read started after the call. The map is shared: the
// caller must not change it.
func (f *freshReads) get(ctx context.Context) (map[int64]int64, error) {
	f.mu.Lock()
	r := f.next
	if r == nil {
		r = &versionsRead{done: make(chan struct{})}
		f.next = r
	}
	if !f.running {
		f.running = true
		go f.run()
	}
	f.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.done:
		return r.versions, r.err
	}
}

// run performs the queued reads one after the other until none is queued. A read runs
// detached from its callers (any of them may go away) and is bounded like a snapshot build.
func (f *freshReads) run() {
	for {
		f.mu.Lock()
		r := f.next
		if r == nil {
			f.running = false
			f.mu.Unlock()
			return
		}
		f.next = nil
		f.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), snapshotBuildTimeout)
		r.versions, r.err = f.read(ctx)
		cancel()
		close(r.done)
	}
}

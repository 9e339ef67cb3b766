package loginlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newLimiter(t *testing.T, cfg Config) (*Limiter, *clock, *prometheus.Registry) {
	t.Helper()
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg.Now = c.Now
	reg := prometheus.NewRegistry()
	return New(cfg, reg), c, reg
}

var (
	addrA = netip.MustParseAddr("198.51.100.1")
	addrB = netip.MustParseAddr("198.51.100.2")
	addrC = netip.MustParseAddr("2001:db8::3")
)

func fail(t *testing.T, l *Limiter, addr netip.Addr, email string) {
	t.Helper()
	a, r := l.Begin(context.Background(), addr, email)
	if r != nil {
		t.Fatalf("login %s %s refused: %+v", addr, email, r)
	}
	a.Failed()
}

func refusedFor(t *testing.T, l *Limiter, addr netip.Addr, email, reason string) *Refusal {
	t.Helper()
	a, r := l.Begin(context.Background(), addr, email)
	if r == nil {
		a.Done()
		t.Fatalf("login %s %s admitted, want refused for %s", addr, email, reason)
	}
	if r.Reason != reason || r.RetryAfter < time.Second {
		t.Fatalf("login %s %s refused %+v, want reason %s and a Retry-After", addr, email, r, reason)
	}
	return r
}

// TestPerAddress: an address that failed with many emails is refused for any email, while
// other addresses are not; after the window (at most two) it is admitted again.
func TestPerAddress(t *testing.T) {
	l, c, reg := newLimiter(t, Config{PerAddress: 3, PerEmail: 100, Window: time.Minute, Entries: 100})
	for i := range 3 {
		fail(t, l, addrA, fmt.Sprintf("user%d@example.com", i))
	}
	r := refusedFor(t, l, addrA, "new@example.com", ReasonAddress)
	if r.RetryAfter > 2*time.Minute {
		t.Errorf("Retry-After %v, want at most two windows", r.RetryAfter)
	}
	fail(t, l, addrB, "new@example.com")
	c.add(time.Minute)
	refusedFor(t, l, addrA, "new@example.com", ReasonAddress) // still within the previous generation
	c.add(time.Minute)
	fail(t, l, addrA, "new@example.com")
	if got := refusals(t, reg); len(got) != 3 || got[ReasonAddress] != 2 {
		t.Errorf("refusals counted %v, want 2 for the address and a series for every reason", got)
	}
}

// TestPerEmail: an email that failed from many addresses is refused from any address
// (compared without case), and a success forgets its failures but not the address's.
func TestPerEmail(t *testing.T) {
	l, _, _ := newLimiter(t, Config{PerAddress: 3, PerEmail: 2, Window: time.Minute, Entries: 100})
	fail(t, l, addrA, "Victim@example.com")
	fail(t, l, addrB, " victim@example.com")
	refusedFor(t, l, addrC, "VICTIM@example.com", ReasonEmail)
	fail(t, l, addrC, "other@example.com")

	l, _, _ = newLimiter(t, Config{PerAddress: 3, PerEmail: 2, Window: time.Minute, Entries: 100})
	fail(t, l, addrA, "me@example.com")
	fail(t, l, addrA, "victim@example.com")
	a, r := l.Begin(context.Background(), addrA, "me@example.com")
	if r != nil {
		t.Fatal(r)
	}
	a.Succeeded()
	fail(t, l, addrB, "me@example.com") // me's count starts again: one failure, under 2
	if a, r := l.Begin(context.Background(), addrB, "me@example.com"); r != nil {
		t.Errorf("after a success the email has one failure, yet refused: %+v", r)
	} else {
		a.Done()
	}
	fail(t, l, addrA, "third@example.com")
	refusedFor(t, l, addrA, "fourth@example.com", ReasonAddress) // the success did not reset the address
}

// TestBoundedMemory: a flood of made-up emails and addresses never holds more than two
// generations of Entries keys a table.
func TestBoundedMemory(t *testing.T) {
	l, _, _ := newLimiter(t, Config{PerAddress: 1 << 30, PerEmail: 1 << 30, Window: time.Hour, Entries: 100})
	for i := range 10000 {
		fail(t, l, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), fmt.Sprintf("u%d@example.com", i))
	}
	for name, tb := range map[string]*table{"addresses": l.addresses, "emails": l.emails} {
		if n := len(tb.cur) + len(tb.prev); n > 200 {
			t.Errorf("%s hold %d keys, want at most 200", name, n)
		}
	}
}

// TestHashSlots: with every hash slot taken a login waits up to HashWait and is refused as
// busy; past the waiting room it is refused at once; a freed slot admits the next. HashWait
// is long enough that "at once" can be told from "after the wait" on a loaded machine: a
// login that waited would take the whole second, one refused at once is given half of it.
func TestHashSlots(t *testing.T) {
	const hashWait = time.Second
	l, _, reg := newLimiter(t, Config{PerAddress: 100, PerEmail: 100, Window: time.Minute, MaxHashes: 1, HashWait: hashWait, Entries: 100})
	held, r := l.Begin(context.Background(), addrA, "a@example.com")
	if r != nil {
		t.Fatal(r)
	}
	start := time.Now()
	refusedFor(t, l, addrB, "b@example.com", ReasonBusy)
	if d := time.Since(start); d < hashWait {
		t.Errorf("a busy login was refused after %v, want after the hash wait", d)
	}
	// Fill the waiting room (8 per slot), then one more is refused without waiting.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a, r := l.Begin(context.Background(), addrB, "b@example.com"); r == nil {
				a.Done()
			}
		}()
	}
	for len(l.waiters) < 8 {
		time.Sleep(time.Millisecond)
	}
	start = time.Now()
	refusedFor(t, l, addrC, "c@example.com", ReasonBusy)
	if d := time.Since(start); d > hashWait/2 {
		t.Errorf("a login past the waiting room was refused after %v, want at once", d)
	}
	wg.Wait()
	held.Failed()
	a, r := l.Begin(context.Background(), addrC, "c@example.com")
	if r != nil {
		t.Fatalf("with the slot freed: %+v", r)
	}
	a.Succeeded()
	if got := refusals(t, reg)[ReasonBusy]; got < 2 {
		t.Errorf("busy refusals counted %v, want at least 2", got)
	}
}

// refusals reads flagedge_controlplane_login_refusals_total by reason.
func refusals(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	return counters(t, reg, "flagedge_controlplane_login_refusals_total", "reason")
}

// counters reads the counter name of reg by its one label.
func counters(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					out[lp.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestWaitersSeeNewFailures: logins that passed the gates and then waited for a hash are
// looked at again once they have it, so a burst from one address gets no more hashes than
// its limit.
func TestWaitersSeeNewFailures(t *testing.T) {
	l, _, _ := newLimiter(t, Config{PerAddress: 3, PerEmail: 100, Window: time.Minute, MaxHashes: 1, HashWait: 5 * time.Second, Entries: 100})
	var admitted sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for i := range 9 {
		admitted.Add(1)
		go func() {
			defer admitted.Done()
			a, r := l.Begin(context.Background(), addrA, fmt.Sprintf("u%d@example.com", i))
			if r != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			time.Sleep(5 * time.Millisecond) // the hash
			a.Failed()
		}()
	}
	admitted.Wait()
	if n != 3 {
		t.Errorf("%d logins from one address were checked, want its limit of 3", n)
	}
}

// memStore is a Store in memory, shared by the limiters of a test as PostgreSQL is by
// replicas; err makes every statement fail.
type memStore struct {
	mu     sync.Mutex
	counts map[Key]map[time.Time]int
	err    error
}

func (s *memStore) Failures(_ context.Context, since time.Time, keys ...Key) ([]Count, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	var out []Count
	for _, k := range keys {
		for w, n := range s.counts[k] {
			if !w.Before(since) {
				out = append(out, Count{Key: k, Window: w, Failures: n})
			}
		}
	}
	return out, nil
}

func (s *memStore) Fail(_ context.Context, window, _ time.Time, keys ...Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if s.counts == nil {
		s.counts = map[Key]map[time.Time]int{}
	}
	for _, k := range keys {
		if s.counts[k] == nil {
			s.counts[k] = map[time.Time]int{}
		}
		s.counts[k][window]++
	}
	return nil
}

func (s *memStore) Forget(_ context.Context, k Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	delete(s.counts, k)
	return nil
}

func (s *memStore) fails(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// TestSharedCounts: limiters on one store (replicas) count failures together: an email's
// and an address's limits are reached by failures spread over both, and a success on one
// forgets the email's failures on both.
func TestSharedCounts(t *testing.T) {
	store := &memStore{}
	cfg := Config{PerAddress: 4, PerEmail: 2, Window: time.Minute, Entries: 100, Store: store}
	a, c, _ := newLimiter(t, cfg)
	b, _, _ := newLimiter(t, cfg)
	fail(t, a, addrA, "victim@example.com")
	fail(t, b, addrB, "Victim@example.com")
	refusedFor(t, a, addrC, "victim@example.com", ReasonEmail)
	r := refusedFor(t, b, addrC, "victim@example.com", ReasonEmail)
	if r.RetryAfter > 2*time.Minute {
		t.Errorf("Retry-After %v, want at most two windows", r.RetryAfter)
	}

	fail(t, a, addrC, "me@example.com")
	att, ref := b.Begin(context.Background(), addrB, "me@example.com")
	if ref != nil {
		t.Fatal(ref)
	}
	att.Succeeded()
	fail(t, a, addrB, "me@example.com") // me's count starts again on both: one failure, under 2
	for _, l := range []*Limiter{a, b} {
		if att, ref := l.Begin(context.Background(), addrA, "me@example.com"); ref != nil {
			t.Errorf("after a success on another replica the email has one failure, yet refused: %+v", ref)
		} else {
			att.Done()
		}
	}

	// addrB has failed twice, once on each; two more on b reach its limit on a.
	fail(t, b, addrB, "x@example.com")
	fail(t, b, addrB, "y@example.com")
	refusedFor(t, a, addrB, "z@example.com", ReasonAddress)
	// Two windows on, every failure is forgotten (the store's clock is the limiter's).
	c.add(2 * time.Minute)
	fail(t, a, addrB, "victim@example.com")
}

// TestStoreFails: while the store fails, a limiter counts and refuses by its own failures
// alone, counts the failed statements by op, and logs once when the outage starts and once
// when the store answers again.
func TestStoreFails(t *testing.T) {
	store := &memStore{}
	var logs syncBuffer
	l, _, reg := newLimiter(t, Config{PerAddress: 100, PerEmail: 2, Window: time.Minute, Entries: 100, Store: store,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	store.fails(errors.New("connection refused"))
	fail(t, l, addrA, "victim@example.com")
	fail(t, l, addrB, "victim@example.com")
	refusedFor(t, l, addrC, "victim@example.com", ReasonEmail)
	a, r := l.Begin(context.Background(), addrA, "me@example.com")
	if r != nil {
		t.Fatal(r)
	}
	a.Succeeded()
	got := storeErrors(t, reg)
	// Each of the three admitted logins checked before and after taking its hash, the
	// refused one once.
	if got[opCheck] != 7 || got[opFail] != 2 || got[opForget] != 1 {
		t.Errorf("store errors counted %v, want 7 checks, 2 failures, 1 forget", got)
	}
	store.fails(nil)
	fail(t, l, addrA, "other@example.com")
	out := logs.String()
	if strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "connection refused") || strings.Count(out, "level=INFO") != 1 {
		t.Errorf("want one warning naming the error and one notice of the recovery, logged:\n%s", out)
	}
}

// storeErrors reads flagedge_controlplane_login_limit_store_errors_total by op.
func storeErrors(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	return counters(t, reg, "flagedge_controlplane_login_limit_store_errors_total", "op")
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

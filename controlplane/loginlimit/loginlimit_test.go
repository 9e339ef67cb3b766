package loginlimit

import (
	"context"
	"fmt"
	"net/netip"
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
// busy; past the waiting room it is refused at once; a freed slot admits the next.
func TestHashSlots(t *testing.T) {
	l, _, reg := newLimiter(t, Config{PerAddress: 100, PerEmail: 100, Window: time.Minute, MaxHashes: 1, HashWait: 100 * time.Millisecond, Entries: 100})
	held, r := l.Begin(context.Background(), addrA, "a@example.com")
	if r != nil {
		t.Fatal(r)
	}
	start := time.Now()
	refusedFor(t, l, addrB, "b@example.com", ReasonBusy)
	if d := time.Since(start); d < 100*time.Millisecond {
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
	if d := time.Since(start); d > 50*time.Millisecond {
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
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "flagedge_controlplane_login_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" {
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

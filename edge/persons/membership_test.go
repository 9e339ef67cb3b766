package persons

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/flagedge/flagedge/edge/bloomset"
	"github.com/flagedge/flagedge/shared/bloomkeys"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// giveFilter installs a filter holding distinctIDs for project 1, as the stream does.
func giveFilter(t *testing.T, s *Store, reset bool, distinctIDs ...string) {
	t.Helper()
	f := bloomkeys.NewFilter(len(distinctIDs))
	for _, d := range distinctIDs {
		f.Add(bloomkeys.PersonKey(nil, d))
	}
	raw, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Membership().Apply(&syncpb.WatchResponse{MembershipReset: reset,
		MembershipFilters: []*syncpb.MembershipFilter{{ProjectId: 1, Bloom: raw}}}); err != nil {
		t.Fatal(err)
	}
}

func announce(t *testing.T, s *Store, distinctID string) {
	t.Helper()
	if err := s.Membership().Apply(&syncpb.WatchResponse{MembershipAdditions: []*syncpb.MembershipAdditions{
		{ProjectId: 1, Keys: [][]byte{bloomkeys.PersonKey(nil, distinctID)}}}}); err != nil {
		t.Fatal(err)
	}
}

func TestFilterSkipsLookupsOfUnstoredPersons(t *testing.T) {
	s, cp := newStore(t, testConfig)
	ctx := context.Background()
	giveFilter(t, s, true, "known")
	p, err := s.Person(ctx, 1, 1, false, "stranger")
	if err != nil || p.Found || cp.personCalls.Load() != 0 {
		t.Fatalf("a person the filter lacks: %+v, %v, %d calls", p, err, cp.personCalls.Load())
	}
	if p, err := s.Person(ctx, 1, 1, false, "known"); err != nil || !p.Found || cp.personCalls.Load() != 1 {
		t.Fatalf("a person the filter holds: %+v, %v, %d calls", p, err, cp.personCalls.Load())
	}
	// What this edge captured still applies to a person the control plane does not have.
	s.ApplyPersonUpdate(1, "stranger", map[string]any{"plan": "pro"}, nil, nil)
	if p, _ := s.Person(ctx, 1, 1, false, "stranger"); p.Properties["plan"] != "pro" {
		t.Fatalf("overlay of an unstored person: %+v", p)
	}
}

// TestAnnouncementForgetsNotFound: a person looked up and not found (a false positive, or a
// look-up before it was stored) is looked up again as soon as the control plane announces it,
// not when the miss expires.
func TestAnnouncementForgetsNotFound(t *testing.T) {
	s, cp := newStore(t, testConfig) // misses cached for a minute
	ctx := context.Background()
	giveFilter(t, s, true, "soon")
	if p, _ := s.Person(ctx, 1, 1, false, "soon"); p.Found {
		t.Fatal("found before it is stored")
	}
	s.settle()
	cp.mu.Lock()
	cp.persons["soon"] = map[string]any{"plan": "pro"}
	cp.mu.Unlock()
	announce(t, s, "soon")
	if p, _ := s.Person(ctx, 1, 1, false, "soon"); !p.Found || p.Properties["plan"] != "pro" {
		t.Fatalf("after the announcement: %+v", p)
	}
}

// TestAnnouncementDuringALookup: a look-up under way when the person is announced must not
// cache its "not found", which may predate the person.
func TestAnnouncementDuringALookup(t *testing.T) {
	cfg := testConfig
	cfg.Timeout = 5 * time.Second // the look-up is held for a second below and must be answered
	s, cp := newStore(t, cfg)
	ctx := context.Background()
	giveFilter(t, s, true, "racing")
	// The look-up is held at the control plane for a second: the announcement is made once the
	// look-up has reached it, well before it is answered.
	cp.setDelay(time.Second)
	calls := cp.personCalls.Load()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if p, _ := s.Person(ctx, 1, 1, false, "racing"); p.Found {
			t.Error("found before it is stored")
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); cp.personCalls.Load() == calls; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the look-up never reached the control plane")
		}
	}
	announce(t, s, "racing") // the announcement overtakes the look-up's answer
	wg.Wait()
	cp.setDelay(0)
	cp.mu.Lock()
	cp.persons["racing"] = map[string]any{"plan": "pro"}
	cp.mu.Unlock()
	s.settle()
	if p, _ := s.Person(ctx, 1, 1, false, "racing"); !p.Found {
		t.Fatalf("a miss cached across the announcement: %+v", p)
	}
}

// TestReplacedFiltersVoidMisses: filters replaced whole (a reset at reconnection) may hold
// keys never announced to this edge: every cached miss from before is looked up again.
func TestReplacedFiltersVoidMisses(t *testing.T) {
	s, cp := newStore(t, testConfig)
	ctx := context.Background()
	giveFilter(t, s, true, "offline")
	if p, _ := s.Person(ctx, 1, 1, false, "offline"); p.Found {
		t.Fatal("found before it is stored")
	}
	s.settle()
	cp.mu.Lock()
	cp.persons["offline"] = map[string]any{"plan": "pro"}
	cp.mu.Unlock()
	giveFilter(t, s, true, "offline") // stored while the stream was down: no announcement
	if p, _ := s.Person(ctx, 1, 1, false, "offline"); !p.Found {
		t.Fatalf("a miss from before the reset: %+v", p)
	}
}

// TestPersonsCreatedHere: a person this edge's capture creates is answered from what it
// captured, without a look-up, until the control plane announces it; then it is looked up.
func TestPersonsCreatedHere(t *testing.T) {
	s, cp := newStore(t, testConfig)
	ctx := context.Background()
	giveFilter(t, s, true, "known")
	s.ApplyPersonUpdate(1, "newcomer", map[string]any{"plan": "pro"}, nil, nil)
	s.Captured(1, [][]byte{bloomkeys.PersonKey(nil, "newcomer"), bloomkeys.PersonKey(nil, "known")})
	if r := s.Membership().CheckPerson(1, "newcomer"); r != bloomset.Present {
		t.Fatalf("a captured person is not in the filter: %v", r)
	}
	p, err := s.Person(ctx, 1, 1, false, "newcomer")
	if err != nil || p.Properties["plan"] != "pro" || cp.personCalls.Load() != 0 {
		t.Fatalf("a person created here: %+v, %v, %d calls", p, err, cp.personCalls.Load())
	}
	cp.mu.Lock()
	cp.persons["newcomer"] = map[string]any{"plan": "pro", "company": "acme"} // stored, with more from elsewhere
	cp.mu.Unlock()
	announce(t, s, "newcomer")
	if p, _ := s.Person(ctx, 1, 1, false, "newcomer"); p.Properties["company"] != "acme" || cp.personCalls.Load() != 1 {
		t.Fatalf("after the announcement: %+v, %d calls", p, cp.personCalls.Load())
	}
}

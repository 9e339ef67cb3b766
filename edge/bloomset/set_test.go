package bloomset

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/shared/bloomkeys"
	"github.com/flagedge/flagedge/shared/syncpb"
)

func filterMsg(t *testing.T, projectID int64, ids ...string) *syncpb.MembershipFilter {
	t.Helper()
	f := bloomkeys.NewFilter(len(ids))
	for _, id := range ids {
		f.Add(bloomkeys.PersonKey(nil, id))
	}
	raw, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return &syncpb.MembershipFilter{ProjectId: projectID, Bloom: raw, Keys: int64(len(ids))}
}

func personKeys(ids ...string) [][]byte {
	var out [][]byte
	for _, id := range ids {
		out = append(out, bloomkeys.PersonKey(nil, id))
	}
	return out
}

func newSet(t *testing.T, max int64, onAdd func(int64, bloomkeys.Key)) *Set {
	t.Helper()
	return NewSet(max, Hooks{Announced: onAdd}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
}

func TestUnknownUntilAFilterArrives(t *testing.T) {
	s := newSet(t, 0, nil)
	if r := s.CheckPerson(1, "alice"); r != Unknown {
		t.Fatalf("no filter: %v, want Unknown", r)
	}
	if err := s.Apply(&syncpb.WatchResponse{MembershipReset: true, MembershipFilters: []*syncpb.MembershipFilter{filterMsg(t, 1, "alice")}}); err != nil {
		t.Fatal(err)
	}
	if r := s.CheckPerson(1, "alice"); r != Present {
		t.Fatalf("alice: %v, want Present", r)
	}
	if r := s.CheckPerson(1, "bob"); r != Absent {
		t.Fatalf("bob: %v, want Absent", r)
	}
	if r := s.CheckPerson(2, "alice"); r != Unknown {
		t.Fatalf("another project: %v, want Unknown", r)
	}
	// A distinct id longer than the stack buffer is checked too.
	long := string(make([]byte, 500))
	if r := s.CheckPerson(1, long); r != Absent {
		t.Fatalf("long id: %v", r)
	}
}

func TestResetDropsEveryFilter(t *testing.T) {
	s := newSet(t, 0, nil)
	s.Apply(&syncpb.WatchResponse{MembershipFilters: []*syncpb.MembershipFilter{filterMsg(t, 1, "a"), filterMsg(t, 2, "b")}})
	// A reset with one filter: project 2's filter is gone (it may lack keys), project 1's new.
	s.Apply(&syncpb.WatchResponse{MembershipReset: true, MembershipFilters: []*syncpb.MembershipFilter{filterMsg(t, 1, "c")}})
	if r := s.CheckPerson(2, "b"); r != Unknown {
		t.Fatalf("project 2 after reset: %v, want Unknown", r)
	}
	if r := s.CheckPerson(1, "c"); r != Present {
		t.Fatalf("project 1's new filter: %v", r)
	}
	s.Drop([]int64{1})
	if r := s.CheckPerson(1, "c"); r != Unknown {
		t.Fatalf("dropped project: %v", r)
	}
}

// TestAdditionsAreNeverLost adds keys in messages of varied sizes, across the folds of the
// small layer into the large one, and checks every key after every message.
func TestAdditionsAreNeverLost(t *testing.T) {
	var stored []string
	for i := range 20_000 {
		stored = append(stored, fmt.Sprint("stored-", i))
	}
	t.Run("small filter, copied whole", func(t *testing.T) { additionsAreNeverLost(t, filterMsg(t, 7)) })
	t.Run("large filter, with a small layer", func(t *testing.T) { additionsAreNeverLost(t, filterMsg(t, 7, stored...)) })
}

func additionsAreNeverLost(t *testing.T, base *syncpb.MembershipFilter) {
	var forgotten []string
	s := newSet(t, 0, func(p int64, k bloomkeys.Key) { forgotten = append(forgotten, k.DistinctID) })
	s.Apply(&syncpb.WatchResponse{MembershipReset: true, MembershipFilters: []*syncpb.MembershipFilter{base}})
	large := len(base.Bloom) > smallFilterBytes
	layered := false
	var all []string
	for batch := 0; len(all) < 3*deltaCapacity; batch++ {
		var ids []string
		for i := range 1 + batch*37%900 {
			ids = append(ids, fmt.Sprintf("u%d-%d", batch, i))
		}
		add := &syncpb.MembershipAdditions{ProjectId: 7, Keys: personKeys(ids...)}
		if batch%5 == 0 { // groups too
			add.Keys = append(add.Keys, bloomkeys.GroupKey(nil, 2, fmt.Sprintf("org-%d", batch)))
		}
		if err := s.Apply(&syncpb.WatchResponse{MembershipAdditions: []*syncpb.MembershipAdditions{add}}); err != nil {
			t.Fatal(err)
		}
		all = append(all, ids...)
		layered = layered || (*s.filters.Load())[7].cur.Load().delta != nil
		for _, id := range all {
			if s.CheckPerson(7, id) != Present {
				t.Fatalf("after batch %d: %s missing", batch, id)
			}
		}
		for b := 0; b <= batch; b += 5 {
			if s.CheckGroup(7, 2, fmt.Sprintf("org-%d", b)) != Present {
				t.Fatalf("after batch %d: group org-%d missing", batch, b)
			}
		}
	}
	if len(forgotten) < len(all) {
		t.Fatalf("onAdd told of %d keys, want ≥ %d", len(forgotten), len(all))
	}
	if layered != large {
		t.Fatalf("a filter of %d bytes used a small layer: %v", len(base.Bloom), layered)
	}
}

// TestConcurrentReadsAndWrites runs checks while additions and replacements arrive; with
// -race it proves the read path safe without a lock.
func TestConcurrentReadsAndWrites(t *testing.T) {
	many := []string{"seed"}
	for i := range 20_000 { // large enough for the small layer and its folds
		many = append(many, fmt.Sprint("stored-", i))
	}
	s := newSet(t, 0, nil)
	s.Apply(&syncpb.WatchResponse{MembershipReset: true, MembershipFilters: []*syncpb.MembershipFilter{filterMsg(t, 1, many...)}})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if s.CheckPerson(1, "seed") == Absent {
					t.Error("seed absent")
					return
				}
				s.CheckPerson(1, fmt.Sprint(i))
			}
		}()
	}
	for i := range 6000 {
		s.Apply(&syncpb.WatchResponse{MembershipAdditions: []*syncpb.MembershipAdditions{{ProjectId: 1, Keys: personKeys(fmt.Sprint("k", i))}}})
		s.Add(1, bloomkeys.PersonKey(nil, fmt.Sprint("local", i)))
		if i%2500 == 0 {
			s.Apply(&syncpb.WatchResponse{MembershipFilters: []*syncpb.MembershipFilter{filterMsg(t, 1, many...)}})
		}
	}
	close(stop)
	wg.Wait()
}

func TestCapDropsTheLargestFilters(t *testing.T) {
	small := filterMsg(t, 1, "a")
	var big []string
	for i := range 20_000 {
		big = append(big, fmt.Sprint(i))
	}
	large := filterMsg(t, 2, big...)
	s := newSet(t, int64(len(small.Bloom))+1024, nil)
	if err := s.Apply(&syncpb.WatchResponse{MembershipReset: true, MembershipFilters: []*syncpb.MembershipFilter{small, large}}); err != nil {
		t.Fatal(err)
	}
	if r := s.CheckPerson(2, "1"); r != Unknown {
		t.Fatalf("over the cap: %v, want Unknown (look up)", r)
	}
	if r := s.CheckPerson(1, "a"); r != Present {
		t.Fatalf("within the cap: %v", r)
	}
	// Additions for a project without a filter are ignored: it keeps being looked up.
	s.Apply(&syncpb.WatchResponse{MembershipAdditions: []*syncpb.MembershipAdditions{{ProjectId: 2, Keys: personKeys("x")}}})
	if r := s.CheckPerson(2, "x"); r != Unknown {
		t.Fatalf("additions to a refused filter: %v", r)
	}
	if s.Bytes() > int64(len(small.Bloom))+1024 {
		t.Fatalf("%d bytes held, cap %d", s.Bytes(), len(small.Bloom)+1024)
	}
}

func TestUndecodableFilterIsNotKept(t *testing.T) {
	s := newSet(t, 0, nil)
	s.Apply(&syncpb.WatchResponse{MembershipFilters: []*syncpb.MembershipFilter{filterMsg(t, 1, "a")}})
	err := s.Apply(&syncpb.WatchResponse{MembershipFilters: []*syncpb.MembershipFilter{{ProjectId: 1, Bloom: []byte{1, 2, 3}}}})
	if err == nil {
		t.Fatal("a broken filter was accepted")
	}
	if r := s.CheckPerson(1, "b"); r != Unknown {
		t.Fatalf("after a broken filter: %v, want Unknown", r)
	}
}

func BenchmarkCheckPerson(b *testing.B) {
	s := NewSet(0, Hooks{}, slog.New(slog.DiscardHandler), nil)
	var ids []string
	for i := range 100_000 {
		ids = append(ids, fmt.Sprintf("0192e0c4-7d1b-7c3e-9f1a-%012d", i))
	}
	f := bloomkeys.NewFilter(len(ids))
	for _, id := range ids {
		f.Add(bloomkeys.PersonKey(nil, id))
	}
	raw, _ := f.MarshalBinary()
	s.Apply(&syncpb.WatchResponse{MembershipFilters: []*syncpb.MembershipFilter{{ProjectId: 1, Bloom: raw}}})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.CheckPerson(1, ids[i%len(ids)])
	}
}

// TestLocalAdditions: keys this edge adds itself are held at once, however many, and a key
// the filter already holds costs nothing.
func TestLocalAdditions(t *testing.T) {
	s := newSet(t, 0, nil)
	s.Add(1, bloomkeys.PersonKey(nil, "nobody")) // no filter: nothing to add to
	if r := s.CheckPerson(1, "nobody"); r != Unknown {
		t.Fatalf("without a filter: %v", r)
	}
	s.Apply(&syncpb.WatchResponse{MembershipReset: true, MembershipFilters: []*syncpb.MembershipFilter{filterMsg(t, 1, "known")}})
	before := (*s.filters.Load())[1].cur.Load()
	s.Add(1, bloomkeys.PersonKey(nil, "known"))
	if (*s.filters.Load())[1].cur.Load() != before {
		t.Fatal("adding a key the filter holds replaced the filter")
	}
	var wg sync.WaitGroup
	for w := range 4 { // captures at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3 * deltaCapacity / 4 {
				s.Add(1, bloomkeys.PersonKey(nil, fmt.Sprintf("w%d-%d", w, i)))
			}
		}()
	}
	wg.Wait()
	for w := range 4 {
		for i := range 3 * deltaCapacity / 4 {
			if s.CheckPerson(1, fmt.Sprintf("w%d-%d", w, i)) != Present {
				t.Fatalf("w%d-%d missing", w, i)
			}
		}
	}
}

// TestCheckDoesNotAllocate: the check is on the /decide path.
func TestCheckDoesNotAllocate(t *testing.T) {
	s := newSet(t, 0, nil)
	s.Apply(&syncpb.WatchResponse{MembershipReset: true, MembershipFilters: []*syncpb.MembershipFilter{filterMsg(t, 1, "a")}})
	id := "0192e0c4-7d1b-7c3e-9f1a-000000000042"
	if n := testing.AllocsPerRun(100, func() { s.CheckPerson(1, id); s.CheckGroup(1, 0, id); s.Count(Absent) }); n != 0 {
		t.Fatalf("%v allocations per check", n)
	}
}

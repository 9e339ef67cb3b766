package relay

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	gproto "google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/edge/bloomset"
	"github.com/flagedge/flagedge/shared/bloomkeys"
	"github.com/flagedge/flagedge/shared/syncpb"
)

func emptyFilter(projectID int64, n int) *syncpb.MembershipFilter {
	raw, _ := bloomkeys.NewFilter(n).MarshalBinary()
	return &syncpb.MembershipFilter{ProjectId: projectID, Bloom: raw}
}

// heldHas reports whether the filter m holds for a project has the key, as an edge that
// installs it would say.
func heldHas(t *testing.T, m *Members, projectID int64, key string) bool {
	t.Helper()
	var f syncpb.MembershipFilter
	_, content, _ := cutField(m.projects[projectID].filter)
	if err := gproto.Unmarshal(content, &f); err != nil {
		t.Fatal(err)
	}
	set := bloomset.NewSet(0, bloomset.Hooks{}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err := set.Apply(&syncpb.WatchResponse{MembershipFilters: []*syncpb.MembershipFilter{&f}}); err != nil {
		t.Fatalf("the held filter of project %d does not decode: %v", projectID, err)
	}
	return set.CheckPerson(projectID, key) == bloomset.Present
}

// TestMembersStayBounded: additions past a filter's size are folded into it, so what the
// relay holds stays about the filters' size, while a stream following the log still gets each
// addition; past the cap the largest filter is dropped and every stream is reset; a stream
// that fell behind the log is sent the filters whole.
func TestMembersStayBounded(t *testing.T) {
	m := NewMembers("", 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.Tap(&syncpb.WatchResponse{MembershipReset: true, MembershipFilters: []*syncpb.MembershipFilter{emptyFilter(1, 0)}})
	all := func(int64) bool { return true }
	fields, _, cur, _ := m.since(Cursor{}, all)
	if len(fields) != 1 {
		t.Fatalf("a new stream gets %d fields, want the filter", len(fields))
	}
	following := cur
	for i := range 200 {
		a := &syncpb.MembershipAdditions{ProjectId: 1}
		for j := range 20 {
			a.Keys = append(a.Keys, bloomkeys.PersonKey(nil, fmt.Sprintf("user-%d-%d-with-a-longer-distinct-id", i, j)))
		}
		m.Tap(&syncpb.WatchResponse{MembershipAdditions: []*syncpb.MembershipAdditions{a}})
	}
	h := m.projects[1]
	if h.addBytes > max(len(h.filter), foldBytes) {
		t.Errorf("%d bytes of additions held beside a filter of %d", h.addBytes, len(h.filter))
	}
	if !heldHas(t, m, 1, "user-0-0-with-a-longer-distinct-id") {
		t.Error("a folded addition is not in the held filter")
	}
	fields, reset, _, _ := m.since(following, all)
	if reset || len(fields) != 200 {
		t.Errorf("a stream following the log: %d fields (reset %v), want the 200 additions", len(fields), reset)
	}

	// Past the cap: the largest filter goes, and the streams reset.
	m.max = m.bytes + 10_000
	m.Tap(&syncpb.WatchResponse{MembershipFilters: []*syncpb.MembershipFilter{emptyFilter(2, 0)}})
	m.Tap(&syncpb.WatchResponse{MembershipFilters: []*syncpb.MembershipFilter{emptyFilter(3, 50_000)}})
	if m.projects[3] != nil || m.projects[1] == nil || m.projects[2] == nil {
		t.Errorf("past the cap, held %v: want the largest (3) dropped", keys(m.projects))
	}
	fields, reset, cur, _ = m.since(cur, all)
	if !reset || filters(fields) != 2 {
		t.Errorf("after an eviction: reset %v and %d filters, want a reset and the 2 filters kept", reset, filters(fields))
	}

	// A stream that fell behind the log gets the filters whole, without a reset.
	big := &syncpb.MembershipAdditions{ProjectId: 2, Keys: [][]byte{make([]byte, maxChangeBytes)}}
	m.Tap(&syncpb.WatchResponse{MembershipAdditions: []*syncpb.MembershipAdditions{big}})
	if fields, reset, _, _ = m.since(cur, all); reset || filters(fields) != 2 {
		t.Errorf("a stream behind the log: reset %v and %d filters, want the 2 filters whole", reset, filters(fields))
	}
}

func keys(m map[int64]*held) []int64 {
	var out []int64
	for id := range m {
		out = append(out, id)
	}
	return out
}

// filters counts the whole filters among fields.
func filters(fields [][]byte) int {
	n := 0
	for _, f := range fields {
		if num, _, _ := cutField(f); num == filterField {
			n++
		}
	}
	return n
}

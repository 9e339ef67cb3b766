package relay

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flagedge/flagedge/shared/syncpb"
)

// TestMembersDiskWriteBlocksNoStream: while the disk copy is being rewritten (slowly), Tap and
// since go on; the rewrites asked for meanwhile are written once, as the latest state, and the
// additions after it follow it in the file.
func TestMembersDiskWriteBlocksNoStream(t *testing.T) {
	file := filepath.Join(t.TempDir(), "membership.pb")
	entered, release := make(chan struct{}), make(chan struct{})
	var writes atomic.Int32
	slow := func(path string, data []byte) error {
		if len(data) == 0 {
			return writeFileAtomic(path, data) // NewMembers' own, unless Tap's replaced it
		}
		if writes.Add(1) == 1 {
			entered <- struct{}{}
			<-release
		}
		return writeFileAtomic(path, data)
	}
	m := newMembers(file, 0, slog.New(slog.NewTextHandler(io.Discard, nil)), slow)
	t.Cleanup(m.Close)
	m.Tap(&syncpb.WatchResponse{MembershipReset: true, MembershipFilters: []*syncpb.MembershipFilter{emptyFilter(1, 10)}})
	<-entered // the writer is inside the slow rewrite

	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, id := range []int64{2, 3} { // each a reset: a rewrite asked for
			m.Tap(&syncpb.WatchResponse{MembershipReset: true, MembershipFilters: []*syncpb.MembershipFilter{emptyFilter(id, 10)}})
		}
		m.Tap(&syncpb.WatchResponse{MembershipAdditions: []*syncpb.MembershipAdditions{{ProjectId: 3, Keys: [][]byte{[]byte("k")}}}})
		if fields, _, _, _ := m.since(Cursor{}, func(int64) bool { return true }); len(fields) != 2 {
			t.Errorf("a new stream gets %d fields, want project 3's filter and its addition", len(fields))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a failure's bound, not a wait for the writer
		t.Fatal("Tap or since waited for the disk write")
	}
	close(release)
	m.Close()
	if got := writes.Load(); got != 2 {
		t.Errorf("%d whole writes of filters, want 2: the slow one, and the latest of the two asked for during it", got)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	kept := NewMembers(filepath.Join(t.TempDir(), "none.pb"), 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(kept.Close)
	kept.load(data)
	if h := kept.projects[3]; len(kept.projects) != 1 || h == nil || len(h.additions) != 1 {
		t.Errorf("the disk copy holds %v, want project 3's filter and its addition", kept.projects)
	}
}

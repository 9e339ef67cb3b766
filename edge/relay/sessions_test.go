package relay

import (
	"io"
	"log/slog"
	"testing"

	"github.com/flagedge/flagedge/shared/syncpb"
)

// TestSessionsReportTrees: a relay's report carries the sessions it serves and those a relay
// behind it reported, parents before children, with what each acknowledged; only what
// changed goes again; a report from a relay may name only sessions behind it; a session
// closing takes the sessions behind it along (the upstream told of the top one alone); a new
// session of the relay's own upstream reports everything again.
func TestSessionsReportTrees(t *testing.T) {
	s := NewSessions(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if req, _ := s.next(); req != nil {
		t.Fatalf("a report before the relay has a session upstream: %v", req)
	}
	s.Upstream("own")
	s.open("r2", "relay-2", "relay-2", "")
	s.open("leaf", "leaf-a", "leaf-a", "old-leaf")
	if !s.acknowledge("leaf-a", &syncpb.AcknowledgeRequest{SessionId: "leaf", Versions: map[int64]int64{1: 5}}) {
		t.Fatal("the leaf's acknowledgement refused")
	}
	if s.acknowledge("relay-2", &syncpb.AcknowledgeRequest{SessionId: "leaf", Versions: map[int64]int64{1: 9}}) {
		t.Error("an acknowledgement of another edge's session taken")
	}
	unknown, ok := s.report("relay-2", &syncpb.ReportSessionsRequest{SessionId: "r2",
		Opened: []*syncpb.RelayedSession{{Id: "deep-child", ParentId: "deep", EdgeName: "leaf-c"}, {Id: "deep", EdgeName: "leaf-b"},
			{Id: "stolen", ParentId: "leaf", EdgeName: "leaf-x"}},
		Acknowledgements: []*syncpb.AcknowledgeRequest{{SessionId: "deep", Versions: map[int64]int64{1: 4}}, {SessionId: "leaf", Versions: map[int64]int64{1: 1}}}})
	if !ok {
		t.Fatal("relay-2's report refused")
	}
	// deep-child came before its parent in the report: unknown, reported again by relay-2.
	if len(unknown) != 3 || unknown[0] != "deep-child" || unknown[1] != "stolen" || unknown[2] != "leaf" {
		t.Errorf("unknown %v: want deep-child (its parent not yet known), stolen and leaf (not behind relay-2)", unknown)
	}
	if _, ok := s.report("leaf-a", &syncpb.ReportSessionsRequest{SessionId: "r2"}); ok {
		t.Error("a report naming another edge's session taken")
	}
	req, sent := s.next()
	if req.SessionId != "own" || len(req.Opened) != 3 || req.Opened[2].Id != "deep" || req.Opened[2].ParentId != "r2" {
		t.Fatalf("report %v: want r2 and leaf, then deep behind r2", req)
	}
	if req.Opened[0].Replaces != "old-leaf" && req.Opened[1].Replaces != "old-leaf" {
		t.Errorf("the leaf's replaced session is not reported: %v", req.Opened)
	}
	if len(req.Acknowledgements) != 2 {
		t.Errorf("acknowledgements %v: want the leaf's and deep's", req.Acknowledgements)
	}
	s.done(req, sent, nil)
	if again, _ := s.next(); again != nil {
		t.Errorf("nothing changed, yet %v", again)
	}
	s.acknowledge("leaf-a", &syncpb.AcknowledgeRequest{SessionId: "leaf", Versions: map[int64]int64{1: 6}})
	req, sent = s.next()
	if len(req.Opened) != 0 || len(req.Acknowledgements) != 1 || req.Acknowledgements[0].Versions[1] != 6 {
		t.Errorf("after one acknowledgement: %v", req)
	}
	s.done(req, sent, nil)
	s.close("r2")
	req, sent = s.next()
	if len(req.Closed) != 1 || req.Closed[0] != "r2" {
		t.Errorf("closing r2 reports %v: want r2 alone (the upstream ends deep with it)", req.Closed)
	}
	s.done(req, sent, nil)
	s.Upstream("own-2")
	req, _ = s.next()
	if req.SessionId != "own-2" || len(req.Opened) != 1 || req.Opened[0].Id != "leaf" || req.Acknowledgements[0].Versions[1] != 6 {
		t.Errorf("under a new upstream session: %v, want the leaf again with all it serves", req)
	}
}

// TestSessionsDirtyUntilTold: a report looks only at the sessions not yet told all they serve,
// and a session leaves that set only once the upstream took a report telling it everything:
// a report that failed (done never called) goes again, and an acknowledgement arriving while
// a report is under way goes in the next.
func TestSessionsDirtyUntilTold(t *testing.T) {
	s := NewSessions(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.Upstream("own")
	for _, id := range []string{"a", "b", "c"} {
		s.open(id, "edge-"+id, id, "")
	}
	req, sent := s.next()
	s.done(req, sent, nil)
	if len(s.dirty) != 0 {
		t.Fatalf("%d sessions left to look at after a report told everything", len(s.dirty))
	}
	s.acknowledge("edge-a", &syncpb.AcknowledgeRequest{SessionId: "a", Versions: map[int64]int64{1: 2}})
	if _, sent := s.next(); len(sent) != 1 || len(s.dirty) != 1 {
		t.Fatalf("after a's acknowledgement: report tells %v, %d sessions looked at; want a alone", sent, len(s.dirty))
	}
	// That report failed: the next tells the same.
	req, sent = s.next()
	if len(req.Acknowledgements) != 1 || req.Acknowledgements[0].SessionId != "a" || req.Acknowledgements[0].Versions[1] != 2 {
		t.Fatalf("after a failed report: %v, want a's version 2 again", req)
	}
	s.acknowledge("edge-a", &syncpb.AcknowledgeRequest{SessionId: "a", Versions: map[int64]int64{1: 3}})
	s.acknowledge("edge-b", &syncpb.AcknowledgeRequest{SessionId: "b", Versions: map[int64]int64{1: 3}})
	s.done(req, sent, nil) // took version 2 of a; a's 3 and b's arrived meanwhile
	req, sent = s.next()
	got := map[string]int64{}
	for _, a := range req.Acknowledgements {
		got[a.SessionId] = a.Versions[1]
	}
	if len(got) != 2 || got["a"] != 3 || got["b"] != 3 {
		t.Fatalf("after acknowledgements during a report: %v, want a and b at 3", got)
	}
	s.done(req, sent, nil)
	if again, _ := s.next(); again != nil || len(s.dirty) != 0 {
		t.Errorf("everything told, yet %v (%d sessions looked at)", again, len(s.dirty))
	}
}

package relay

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flagedge/flagedge/internal/backoff"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// session is the Watch stream of an edge behind the relay: served here (parent ""), or
// behind a relay served here (reported by it).
type session struct {
	id, edgeName, edgeID, parent, replaces string
	depth                                  int // 0: served here; else the relays between
	versions                               map[int64]int64
	// reported is whether the upstream holds the session (under the relay's current
	// upstream session); sent is what it was told the session serves.
	reported bool
	sent     map[int64]int64
}

// Sessions holds the sessions behind the relay and reports them upstream (ReportSessions)
// in batches: whatever opens, closes or is acknowledged while a report is under way goes in
// the next, so a change acknowledged by thousands of edges costs the upstream a few calls.
type Sessions struct {
	upstream syncpb.SyncClient
	log      *slog.Logger

	mu   sync.Mutex
	byID map[string]*session
	// dirty are the sessions the upstream may not have been told all of (not reported, or
	// acknowledged since): a report looks at these only, not at the thousands told everything.
	dirty  map[string]*session
	closed []string // reported sessions that ended, to tell the upstream
	own    string   // the relay's session upstream; "" until its stream has one
	wake   chan struct{}
}

// NewSessions returns an empty set of sessions reporting to upstream. Run reports them.
func NewSessions(upstream syncpb.SyncClient, log *slog.Logger) *Sessions {
	return &Sessions{upstream: upstream, log: log, byID: map[string]*session{}, dirty: map[string]*session{}, wake: make(chan struct{}, 1)}
}

func (s *Sessions) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Upstream records the relay's own session upstream: when it changes (the relay's stream
// moved or was replaced), every session is reported again under it.
func (s *Sessions) Upstream(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == s.own {
		return
	}
	s.own, s.closed = id, nil
	for _, ss := range s.byID {
		ss.reported, ss.sent = false, nil
		s.dirty[ss.id] = ss
	}
	s.poke()
}

// open records a session served here.
func (s *Sessions) open(id, edgeName, edgeID, replaces string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := &session{id: id, edgeName: edgeName, edgeID: edgeID, replaces: replaces, versions: map[int64]int64{}}
	s.byID[id], s.dirty[id] = ss, ss
	s.poke()
}

// close forgets a session and every session behind it.
func (s *Sessions) close(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked(id)
	s.poke()
}

func (s *Sessions) closeLocked(id string) {
	ss, ok := s.byID[id]
	if !ok {
		return
	}
	for _, d := range s.behindLocked(id) {
		delete(s.byID, d.id)
		delete(s.dirty, d.id)
	}
	delete(s.byID, id)
	delete(s.dirty, id)
	if ss.reported { // the upstream forgets the sessions behind it with it
		s.closed = append(s.closed, id)
	}
}

// behindLocked returns the sessions behind session id.
func (s *Sessions) behindLocked(id string) []*session {
	var out []*session
	for _, ss := range s.byID {
		if s.underLocked(ss, id) {
			out = append(out, ss)
		}
	}
	return out
}

// underLocked reports whether ss is behind session id.
func (s *Sessions) underLocked(ss *session, id string) bool {
	for p := ss.parent; p != ""; {
		if p == id {
			return true
		}
		parent, ok := s.byID[p]
		if !ok {
			return false
		}
		p = parent.parent
	}
	return false
}

// acknowledge records what a session served here serves now; false when the session is not
// the edge's or has ended.
func (s *Sessions) acknowledge(edgeName string, req *syncpb.AcknowledgeRequest) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.byID[req.SessionId]
	if !ok || ss.edgeName != edgeName || ss.parent != "" {
		return false
	}
	s.applyLocked(ss, req)
	return true
}

func (s *Sessions) applyLocked(ss *session, req *syncpb.AcknowledgeRequest) {
	maps.Copy(ss.versions, req.Versions)
	for _, id := range req.RemovedProjects {
		delete(ss.versions, id)
	}
	s.dirty[ss.id] = ss
	s.poke()
}

// report takes a downstream relay's report of the sessions behind it: the relay is the edge
// named relay, whose session here is req.SessionId. It returns the sessions it does not hold.
func (s *Sessions) report(relay string, req *syncpb.ReportSessionsRequest) (unknown []string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	root, found := s.byID[req.SessionId]
	if !found || root.edgeName != relay || root.parent != "" {
		return nil, false
	}
	inTree := func(id string) (*session, bool) {
		ss, ok := s.byID[id]
		if !ok || (id != root.id && !s.underLocked(ss, root.id)) {
			return nil, false
		}
		return ss, true
	}
	for _, id := range req.Closed {
		if _, ok := inTree(id); ok && id != root.id {
			s.closeLocked(id)
		}
	}
	for _, o := range req.Opened {
		parentID := o.ParentId
		if parentID == "" {
			parentID = root.id
		}
		parent, ok := inTree(parentID)
		if !ok || o.Id == "" || o.Id == root.id {
			unknown = append(unknown, o.Id)
			continue
		}
		if old, ok := s.byID[o.Id]; ok && old.parent == "" {
			unknown = append(unknown, o.Id) // a session served here is not another's to report
			continue
		}
		ss := &session{id: o.Id, edgeName: o.EdgeName, edgeID: o.EdgeId, parent: parentID, replaces: o.Replaces,
			depth: parent.depth + 1, versions: map[int64]int64{}}
		s.byID[o.Id], s.dirty[o.Id] = ss, ss
	}
	for _, a := range req.Acknowledgements {
		ss, ok := inTree(a.SessionId)
		if !ok || ss == root {
			unknown = append(unknown, a.SessionId)
			continue
		}
		s.applyLocked(ss, a)
	}
	s.poke()
	return unknown, true
}

// reportPause gathers what arrives within it into one report; reportTimeout bounds one.
const (
	reportPause   = 20 * time.Millisecond
	reportTimeout = 5 * time.Second
)

// Run reports the sessions upstream until ctx ends.
func (s *Sessions) Run(ctx context.Context) {
	retry := backoff.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		if !backoff.Sleep(ctx, reportPause) {
			return
		}
		req, sent := s.next()
		if req == nil {
			continue
		}
		callCtx, cancel := context.WithTimeout(ctx, reportTimeout)
		resp, err := s.upstream.ReportSessions(callCtx, req)
		cancel()
		switch status.Code(err) {
		case codes.OK:
			retry.Reset()
			s.done(req, sent, resp.Unknown)
		case codes.Unimplemented:
			s.log.Warn("the upstream takes no reports of the sessions behind this relay: rollouts do not count the edges behind it", "err", err)
			return
		case codes.NotFound: // the relay's stream ended: its next one reports everything again
		default:
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("report the sessions behind this relay; retrying", "err", err)
			if !retry.Wait(ctx, backoff.RealClock) {
				return
			}
			s.poke()
		}
	}
}

// next returns the report to send, and what it tells of each session's versions; nil when
// there is nothing to tell (or no session of the relay's own to hang it off yet).
func (s *Sessions) next() (*syncpb.ReportSessionsRequest, map[string]map[int64]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own == "" {
		return nil, nil
	}
	req := &syncpb.ReportSessionsRequest{SessionId: s.own, Closed: slices.Clone(s.closed)}
	sent := map[string]map[int64]int64{}
	var opening []*session
	for _, ss := range s.dirty {
		if !ss.reported {
			opening = append(opening, ss)
		}
		if ack := ss.untold(); ack != nil {
			req.Acknowledgements = append(req.Acknowledgements, ack)
			sent[ss.id] = maps.Clone(ss.versions)
		}
	}
	// A session's parent is opened before it, in the same report or an earlier one.
	slices.SortFunc(opening, func(a, b *session) int { return a.depth - b.depth })
	for _, ss := range opening {
		req.Opened = append(req.Opened, &syncpb.RelayedSession{Id: ss.id, EdgeName: ss.edgeName, EdgeId: ss.edgeID,
			ParentId: ss.parent, Replaces: ss.replaces})
	}
	if len(req.Opened) == 0 && len(req.Closed) == 0 && len(req.Acknowledgements) == 0 {
		return nil, nil
	}
	return req, sent
}

// untold returns what the session serves that the upstream was not told, or nil when it was
// told everything.
func (ss *session) untold() *syncpb.AcknowledgeRequest {
	var ack *syncpb.AcknowledgeRequest
	tell := func() *syncpb.AcknowledgeRequest {
		if ack == nil {
			ack = &syncpb.AcknowledgeRequest{SessionId: ss.id, Versions: map[int64]int64{}}
		}
		return ack
	}
	for id, v := range ss.versions {
		if prev, ok := ss.sent[id]; !ok || prev != v || !ss.reported {
			tell().Versions[id] = v
		}
	}
	for id := range ss.sent {
		if _, ok := ss.versions[id]; !ok && ss.reported {
			a := tell()
			a.RemovedProjects = append(a.RemovedProjects, id)
		}
	}
	return ack
}

// done records a report the upstream took: the sessions it opened and what it told of them,
// except those the upstream does not hold, which are reported again (with all they serve).
func (s *Sessions) done(req *syncpb.ReportSessionsRequest, sent map[string]map[int64]int64, unknown []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.SessionId != s.own {
		return // the relay's session changed meanwhile: everything goes again
	}
	s.closed = slices.DeleteFunc(s.closed, func(id string) bool { return slices.Contains(req.Closed, id) })
	for _, o := range req.Opened {
		if ss, ok := s.byID[o.Id]; ok {
			ss.reported = true
		}
	}
	for id, versions := range sent {
		if ss, ok := s.byID[id]; ok {
			ss.sent = versions
		}
	}
	for _, id := range unknown {
		if ss, ok := s.byID[id]; ok {
			ss.reported, ss.sent = false, nil
			s.dirty[id] = ss
			for _, d := range s.behindLocked(id) {
				d.reported, d.sent = false, nil
				s.dirty[d.id] = d
			}
		}
	}
	// What was told in full leaves the dirty set; what changed meanwhile, or was not taken
	// (a failed report never gets here), stays for the next report.
	for id, ss := range s.dirty {
		if ss.reported && ss.untold() == nil {
			delete(s.dirty, id)
		}
	}
	if len(unknown) > 0 {
		s.poke()
	}
}

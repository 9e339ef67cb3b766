// Package edgeauth is what the two servers of the sync protocol — the control plane and a
// relay (edge --serve-edges) — do alike to admit edges: read the token a call carries, and
// track each edge's open streams so that they are cut as soon as its token leaves the live
// set (a revocation ends them within a second, at every tier). Each server keeps its own
// live set: the control plane reads its database, a relay mirrors its upstream's list.
package edgeauth

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ErrUnauthenticated is the answer to a call without a live edge token.
var ErrUnauthenticated = status.Error(codes.Unauthenticated, "a live edge token is required: issue one with `controlplane edges create`")

// errRevoked ends the streams of an edge cut while they were open.
var errRevoked = status.Error(codes.Unauthenticated, "this edge's token was revoked")

// Token returns the edge token a call carries ("authorization: Bearer <token>"), or "".
func Token(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	var token string
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			token = strings.TrimSpace(t)
		}
	}
	return token
}

// Streams tracks the open streams of each edge, by the edge's id.
type Streams struct {
	log  *slog.Logger
	mu   sync.Mutex
	open map[string]map[*stream]struct{}
}

// stream is one open stream of an edge, with the means to end it.
type stream struct {
	cancel  context.CancelFunc
	revoked atomic.Bool
}

// NewStreams returns a tracker with no stream open.
func NewStreams(log *slog.Logger) *Streams {
	return &Streams{log: log, open: map[string]map[*stream]struct{}{}}
}

// Serve runs a stream of the edge (id, name) through run, with ctx as the stream's context
// (the stream's own, with what the server added to it), until Cut ends it. counted, when
// not nil, is told how many streams of the edge are open after each one opens or closes, in
// order. It returns run's error, or Unauthenticated when the edge was cut meanwhile.
func (s *Streams) Serve(ctx context.Context, ss grpc.ServerStream, id, name string, counted func(open int), run func(grpc.ServerStream) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := &stream{cancel: cancel}
	s.mu.Lock()
	if s.open[id] == nil {
		s.open[id] = map[*stream]struct{}{}
	}
	s.open[id][st] = struct{}{}
	if counted != nil {
		counted(len(s.open[id]))
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.open[id], st)
		n := len(s.open[id])
		if n == 0 {
			delete(s.open, id)
		}
		if counted != nil {
			counted(n)
		}
		s.mu.Unlock()
	}()
	err := run(&contextStream{ServerStream: ss, ctx: ctx})
	if st.revoked.Load() {
		s.log.Info("closed the stream of a revoked edge", "edge", name)
		return errRevoked
	}
	return err
}

// Cut ends the streams of every edge whose id live does not hold.
func (s *Streams) Cut(live func(id string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, streams := range s.open {
		if live(id) {
			continue
		}
		for st := range streams {
			st.revoked.Store(true)
			st.cancel()
		}
	}
}

// contextStream is a server stream with a context of our own.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

package syncserver

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// WithSessions makes the server record every Watch stream as a session of store, served by
// this replica (replicaID: this process, unique), and take the edges' acknowledgements of
// the versions they serve. Without it Watch streams carry no session id and
// acknowledgements are ignored.
func WithSessions(store controlplane.EdgeSessionStore, replicaID string) Option {
	return func(s *Server) {
		s.sessions, s.replicaID = store, replicaID
		s.opens.write, s.closes.write, s.acks.write = allOrNothing(store.OpenSessions), allOrNothing(store.CloseSessions), store.Acknowledge
		s.acks.rows = func(a controlplane.Acknowledgement) int { return 1 + len(a.Versions) + len(a.Removed) }
	}
}

// SetReplicaName names this replica in the edges' list (its host and the address it serves
// on, known once it listens); sessions opened from then on carry it.
func (s *Server) SetReplicaName(name string) { s.replica.Store(&name) }

func (s *Server) replicaName() string {
	if p := s.replica.Load(); p != nil {
		return *p
	}
	return s.replicaID
}

// sessionWriteTimeout bounds a stream's wait for its session to be opened or closed, or an
// acknowledgement to be written, and each batch's write.
const sessionWriteTimeout = 5 * time.Second

// openSession records the stream as a session, after forgetting the one it replaces. It
// returns the session's id ("" without sessions) and the function that closes it. Sessions
// are opened and closed in batches, as acknowledgements are written.
func (s *Server) openSession(ctx context.Context, req *syncpb.WatchRequest) (string, func(), error) {
	if s.sessions == nil {
		return "", func() {}, nil
	}
	open := controlplane.SessionOpening{ID: uuid.NewString(), ReplicaID: s.replicaID, Replica: s.replicaName(),
		EdgeName: edgeName(ctx), EdgeID: req.EdgeId}
	if _, err := uuid.Parse(req.PreviousSessionId); err == nil {
		open.Replaces = req.PreviousSessionId
	}
	if err := s.opens.add(ctx, open); err != nil {
		return "", nil, err
	}
	return open.ID, func() {
		if err := s.closes.add(context.WithoutCancel(ctx), open.ID); err != nil {
			// The session stops counting once no heartbeat marks it.
			s.log.Warn("close edge session", "session", open.ID, "err", err)
		}
	}, nil
}

// maxAcknowledged bounds the projects one acknowledgement may name.
const maxAcknowledged = 100_000

// Acknowledge records the versions the edge serves now, for its stream's session.
func (s *Server) Acknowledge(ctx context.Context, req *syncpb.AcknowledgeRequest) (*syncpb.AcknowledgeResponse, error) {
	if s.sessions == nil {
		return &syncpb.AcknowledgeResponse{}, nil
	}
	id, err := uuid.Parse(req.SessionId)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "session_id is not a session's id")
	}
	if len(req.Versions)+len(req.RemovedProjects) > maxAcknowledged {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d projects per acknowledgement", maxAcknowledged)
	}
	err = s.acks.add(ctx, controlplane.Acknowledgement{SessionID: id.String(), EdgeName: edgeName(ctx),
		Versions: req.Versions, Removed: req.RemovedProjects})
	if controlplane.ErrorKind(err) == controlplane.NotFound {
		return nil, status.Error(codes.NotFound, "no such session: its stream has ended")
	}
	if err != nil {
		return nil, s.unavailable("acknowledge", err)
	}
	return &syncpb.AcknowledgeResponse{}, nil
}

// maxPerWrite bounds the sessions opened or closed, or the acknowledgements written, in one
// transaction; maxRowsPerWrite the rows an acknowledgements' batch writes (one may name up to
// maxAcknowledged projects).
const (
	maxPerWrite     = 2000
	maxRowsPerWrite = 200_000
)

// batcher writes what many streams ask for in batches: when a fleet reconnects, or every
// edge acknowledges a change within a second of it, a transaction (a commit) each would make
// the writes grow with the fleet. One write runs at a time; whatever arrives meanwhile is the
// next batch, so a lone request waits for no timer and thousands share a few commits.
type batcher[T any] struct {
	// write writes a batch, bounded by ctx; it returns each item's result (nil: all
	// succeeded), or an error that fails them all.
	write func(ctx context.Context, items []T) ([]error, error)
	// rows is how many rows an item writes (nil: one); a batch holds at most maxRowsPerWrite,
	// or a single item.
	rows func(T) int

	mu      sync.Mutex
	queue   []*pending[T]
	writing bool
}

type pending[T any] struct {
	item T
	done chan error // capacity 1
}

// add queues an item and waits for its write, at most sessionWriteTimeout. A caller that
// stops waiting does not stop the write.
func (b *batcher[T]) add(ctx context.Context, item T) error {
	p := &pending[T]{item: item, done: make(chan error, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	if !b.writing {
		b.writing = true
		go b.run()
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, sessionWriteTimeout)
	defer cancel()
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run writes the queued items, batch after batch, until none is queued. A batch runs
// detached from the calls that queued it.
func (b *batcher[T]) run() {
	for {
		b.mu.Lock()
		n, rows := 0, 0
		for n < len(b.queue) && n < maxPerWrite {
			r := 1
			if b.rows != nil {
				r = b.rows(b.queue[n].item)
			}
			if n > 0 && rows+r > maxRowsPerWrite {
				break
			}
			n, rows = n+1, rows+r
		}
		if n == 0 {
			b.writing = false
			b.mu.Unlock()
			return
		}
		batch := b.queue[:n:n]
		b.queue = b.queue[n:]
		b.mu.Unlock()
		items := make([]T, len(batch))
		for i, p := range batch {
			items[i] = p.item
		}
		ctx, cancel := context.WithTimeout(context.Background(), sessionWriteTimeout)
		results, err := b.write(ctx, items)
		cancel()
		for i, p := range batch {
			switch {
			case err != nil:
				p.done <- err
			case results != nil:
				p.done <- results[i]
			default:
				p.done <- nil
			}
		}
	}
}

// allOrNothing adapts a write that succeeds or fails as a whole to a batcher's.
func allOrNothing[T any](write func(context.Context, []T) error) func(context.Context, []T) ([]error, error) {
	return func(ctx context.Context, items []T) ([]error, error) { return nil, write(ctx, items) }
}

package state

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/edge/bloomset"
	"github.com/flagedge/flagedge/edge/cpclient"
	"github.com/flagedge/flagedge/internal/backoff"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// Watch keeps the holder current: it opens a Watch stream, says which versions it holds,
// applies what arrives, and on any failure reconnects with jittered backoff, resuming from the
// versions it holds. It returns when ctx ends.
//
// The backoff is capped at one second: an edge must be current again within about a second of
// the control plane coming back, and one Watch call a second per edge is cheap for it.
//
// members, when not nil, receives the membership filters the stream carries; the projects a
// message removes lose theirs.
func Watch(ctx context.Context, client syncpb.SyncClient, h *Holder, members *bloomset.Set, edgeID string, log *slog.Logger) {
	retry := backoff.Backoff{Initial: 50 * time.Millisecond, Max: time.Second}
	var session string // the last stream's, which the next one replaces
	for ctx.Err() == nil {
		received, err := watchOnce(ctx, client, h, members, edgeID, &session)
		if ctx.Err() != nil {
			return
		}
		if received {
			retry.Reset()
		}
		log.Warn("snapshot stream ended; reconnecting", "err", err)
		if !retry.Wait(ctx, backoff.RealClock) {
			return
		}
	}
}

func watchOnce(ctx context.Context, client syncpb.SyncClient, h *Holder, members *bloomset.Set, edgeID string, session *string) (received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer h.SetConnected(false)
	stream, err := client.Watch(ctx, &syncpb.WatchRequest{
		ProtocolVersion: syncpb.ProtocolVersion_PROTOCOL_VERSION_1, EdgeId: edgeID, KnownVersions: h.Versions(),
		DatabaseId: h.DatabaseID(), PreviousSessionId: *session, AcceptsDeflatedSnapshots: true,
	})
	if err != nil {
		return false, err
	}
	var acks *acker
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream closed by the control plane")
			}
			return received, err
		}
		received = true
		var raw *syncpb.WatchResponse
		if h.tap != nil { // what inflate changes, as received
			raw = &syncpb.WatchResponse{Snapshots: msg.Snapshots, DeflatedSnapshots: msg.DeflatedSnapshots,
				RemovedProjects: msg.RemovedProjects, InitialSyncDone: msg.InitialSyncDone, SessionId: msg.SessionId,
				DatabaseId: msg.DatabaseId, MembershipReset: msg.MembershipReset, MembershipFilters: msg.MembershipFilters,
				MembershipAdditions: msg.MembershipAdditions}
		}
		inflate(msg, h.log)
		if err := h.Apply(msg); err != nil {
			h.log.Error("apply snapshot", "err", err)
		}
		if raw != nil {
			h.tap(raw)
		}
		if msg.SessionId != "" && acks == nil {
			*session = msg.SessionId
			acks = &acker{client: client, h: h, session: msg.SessionId, wake: make(chan struct{}, 1), acked: map[int64]int64{}}
			go acks.run(ctx)
		}
		if acks != nil {
			if msg.SessionId != "" || len(msg.Snapshots) > 0 {
				acks.delay.Store(int64(min(time.Duration(msg.AckDelayMs)*time.Millisecond, maxAckDelay)))
			}
			acks.poke()
		}
		if members != nil {
			members.Drop(msg.RemovedProjects)
			if err := members.Apply(msg); err != nil {
				h.log.Error("apply membership filters", "err", err)
			}
		}
		if msg.InitialSyncDone {
			h.SetConnected(true)
		}
	}
}

// maxInflatedBytes bounds what the deflated snapshots of one message may inflate to, all
// together: the largest message the edge accepts from the control plane, which the same
// snapshots sent uncompressed could not have exceeded either.
const maxInflatedBytes = cpclient.MaxMessageBytes

// inflate moves msg's deflated snapshots into its snapshots. One that cannot be inflated
// (or would take the message past maxInflatedBytes) is reported and left out, as a snapshot
// that does not compile is: the project keeps serving the version the edge has.
func inflate(msg *syncpb.WatchResponse, log *slog.Logger) {
	budget := maxInflatedBytes
	for _, d := range msg.DeflatedSnapshots {
		pb, err := syncpb.Inflate(d, budget)
		if err != nil {
			log.Error("apply snapshot", "err", err)
			continue
		}
		budget -= proto.Size(pb)
		msg.Snapshots = append(msg.Snapshots, pb)
	}
	msg.DeflatedSnapshots = nil
}

// acker tells the control plane which versions the edge serves, after every applied message
// of one stream: it sends what changed since its last acknowledgement, one call at a time, so
// a burst of changes costs one call once the previous one is answered. It waits first as
// long as the control plane asks (ack_delay_ms, non-zero when it serves many edges).
type acker struct {
	client  syncpb.SyncClient
	h       *Holder
	session string
	wake    chan struct{} // capacity 1
	acked   map[int64]int64
	delay   atomic.Int64 // the control plane's ack_delay_ms, as a time.Duration
}

func (a *acker) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// ackTimeout bounds one acknowledgement; ackRetry is the pause after a failed one;
// maxAckDelay bounds the wait a control plane may ask for before acknowledging (it asks at
// most 5 s), so that a wrong one cannot keep a rollout from ever being confirmed.
const (
	ackTimeout  = 5 * time.Second
	ackRetry    = 200 * time.Millisecond
	maxAckDelay = 10 * time.Second
)

// run acknowledges until ctx (the stream's) ends, or the control plane says the session is
// over or acknowledgements are not known to it (an older control plane).
func (a *acker) run(ctx context.Context) {
	retrying := false // the last call failed: it goes again after ackRetry, not the delay
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wake:
		}
		if d := time.Duration(a.delay.Load()); d > 0 && !retrying && !backoff.Sleep(ctx, d+rand.N(d)) {
			return
		}
		retrying = false
		req := &syncpb.AcknowledgeRequest{SessionId: a.session, Versions: map[int64]int64{}}
		held := a.h.Versions()
		for id, v := range held {
			if acked, ok := a.acked[id]; !ok || acked != v {
				req.Versions[id] = v
			}
		}
		for id := range a.acked {
			if _, ok := held[id]; !ok {
				req.RemovedProjects = append(req.RemovedProjects, id)
			}
		}
		if len(req.Versions) == 0 && len(req.RemovedProjects) == 0 {
			continue
		}
		callCtx, cancel := context.WithTimeout(ctx, ackTimeout)
		_, err := a.client.Acknowledge(callCtx, req)
		cancel()
		switch status.Code(err) {
		case codes.OK:
			a.acked = held
		case codes.NotFound, codes.Unimplemented, codes.Canceled:
			return
		default:
			a.h.log.Warn("acknowledge versions failed; retrying", "err", err)
			if !backoff.Sleep(ctx, ackRetry) {
				return
			}
			retrying = true
			a.poke()
		}
	}
}

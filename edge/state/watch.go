package state

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/flagedge/flagedge/edge/bloomset"
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
	for ctx.Err() == nil {
		received, err := watchOnce(ctx, client, h, members, edgeID)
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

func watchOnce(ctx context.Context, client syncpb.SyncClient, h *Holder, members *bloomset.Set, edgeID string) (received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer h.SetConnected(false)
	stream, err := client.Watch(ctx, &syncpb.WatchRequest{
		ProtocolVersion: syncpb.ProtocolVersion_PROTOCOL_VERSION_1, EdgeId: edgeID, KnownVersions: h.Versions(),
		DatabaseId: h.DatabaseID(),
	})
	if err != nil {
		return false, err
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream closed by the control plane")
			}
			return received, err
		}
		received = true
		if err := h.Apply(msg); err != nil {
			h.log.Error("apply snapshot", "err", err)
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

package state

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/flagedge/flagedge/shared/syncpb"
)

// Watch keeps the holder current: it opens a Watch stream, says which versions it holds,
// applies what arrives, and on any failure reconnects with jittered exponential backoff
// (100 ms doubling to 5 s), resuming from the versions it holds. It returns when ctx ends.
func Watch(ctx context.Context, client syncpb.SyncClient, h *Holder, edgeID string, log *slog.Logger) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		received, err := watchOnce(ctx, client, h, edgeID)
		if ctx.Err() != nil {
			return
		}
		if received {
			backoff = 100 * time.Millisecond
		}
		log.Warn("snapshot stream ended; reconnecting", "err", err, "retry_in", backoff)
		// Jitter keeps many edges from reconnecting in step after a control-plane restart.
		sleep := backoff/2 + time.Duration(rand.Int64N(int64(backoff)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(sleep):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func watchOnce(ctx context.Context, client syncpb.SyncClient, h *Holder, edgeID string) (received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Watch(ctx, &syncpb.WatchRequest{
		ProtocolVersion: syncpb.ProtocolVersion_PROTOCOL_VERSION_1, EdgeId: edgeID, KnownVersions: h.Versions(),
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
	}
}

package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/internal/backoff"
)

// Listen LISTENs on channel on a dedicated connection and calls onNotify with each payload,
// until ctx ends. When the connection is lost it reconnects with jittered backoff and calls
// onResync, since notifications sent meanwhile are lost. onResync is also called once the
// first connection is up, after the LISTEN and before any notification: what it reads from
// the database then misses nothing that a notification will not bring. An error from either
// callback is handled as a lost connection: reconnect, then onResync. onLost, when not nil,
// is called as soon as the connection is found lost, before the backoff: notifications sent
// from then on are not delivered.
//
// The backoff is capped at one second: while the listener is down, edges are not told of
// changes, so it must be back within about a second of the database.
func Listen(ctx context.Context, url, channel string, log *slog.Logger, onNotify func(ctx context.Context, payload string) error, onResync func(ctx context.Context) error, onLost func()) error {
	retry := backoff.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for {
		err := listenOnce(ctx, url, channel, onNotify, onResync, retry.Reset)
		if ctx.Err() != nil {
			return nil
		}
		if onLost != nil {
			onLost()
		}
		log.Warn("listen connection lost", "channel", channel, "err", err)
		if !retry.Wait(ctx, backoff.RealClock) {
			return nil
		}
	}
}

func listenOnce(ctx context.Context, url, channel string, onNotify func(context.Context, string) error, onResync func(context.Context) error, connected func()) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if err := onResync(ctx); err != nil {
		return err
	}
	connected()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if err := onNotify(ctx, n.Payload); err != nil {
			return err
		}
	}
}

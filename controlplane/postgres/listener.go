package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listen LISTENs on channel on a dedicated connection and calls onNotify with each payload,
// until ctx ends. When the connection is lost it reconnects with jittered backoff and calls
// onResync, since notifications sent meanwhile are lost. onResync is also called once the
// first connection is up.
func Listen(ctx context.Context, url, channel string, log *slog.Logger, onNotify func(payload string), onResync func()) error {
	backoff := 100 * time.Millisecond
	for {
		err := listenOnce(ctx, url, channel, onNotify, onResync, func() { backoff = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("listen connection lost", "channel", channel, "err", err, "retry_in", backoff)
		// Jitter spreads the reconnects of many replicas after a database restart.
		sleep := backoff/2 + time.Duration(rand.Int64N(int64(backoff)))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(sleep):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func listenOnce(ctx context.Context, url, channel string, onNotify func(string), onResync, connected func()) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	connected()
	onResync()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		onNotify(n.Payload)
	}
}

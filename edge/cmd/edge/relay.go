package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"path/filepath"
	"runtime/debug"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/flagedge/flagedge/edge/relay"
	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/internal/daemon"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// relaying is what --serve-edges adds to the edge: the sync service for the edges behind it.
type relaying struct {
	cfg       *config
	log       *slog.Logger
	tls       *tls.Config // nil: plaintext
	upstream  syncpb.SyncClient
	holder    *state.Holder
	snapshots *relay.Snapshots
	members   *relay.Members
	sessions  *relay.Sessions
	auth      *relay.Auth
}

// newRelaying prepares the relay before the holder loads or watches: it taps the holder, so
// that what it applies (from disk too) is passed on.
func newRelaying(cfg *config, upstream syncpb.SyncClient, h *state.Holder, log *slog.Logger) (*relaying, error) {
	t, err := daemon.LoadTLS(cfg.ServeEdgesCert, cfg.ServeEdgesKey, "serve-edges-tls")
	if err != nil {
		return nil, err
	}
	r := &relaying{cfg: cfg, log: log, tls: t, upstream: upstream, holder: h,
		snapshots: relay.NewSnapshots(h, log), sessions: relay.NewSessions(upstream, log),
		members: relay.NewMembers(filepath.Join(cfg.DataDir, "membership.pb"), cfg.MembershipMax, log),
		auth:    relay.NewAuth(upstream, filepath.Join(cfg.DataDir, "live-edges.pb"), log)}
	h.SetTap(func(msg *syncpb.WatchResponse) {
		r.snapshots.Tap(msg)
		r.members.Tap(msg) // after the snapshots: the streams send them first
		if msg.SessionId != "" {
			r.sessions.Upstream(msg.SessionId)
		}
	})
	return r, nil
}

// memoryPerDownstream is the room the memory limit makes for each edge watching through the
// relay: its gRPC connection's buffers, goroutines and stream (the floor, some 37 KB, measured
// 46–54 KB per edge with 2,000–2,500 behind one relay), with some to spare.
const memoryPerDownstream = 64 << 10

// relayMemoryLimit is the soft memory limit of a relay with streams edges watching: the
// --memory-limit of the edge's own work, plus their connections. Those are live memory: a
// limit that left them out would have the garbage collector run without pause once a few
// thousand edges are connected (measured: three quarters of a relay's CPU with 2,500 edges
// behind it and 128 MiB), and starve the relaying itself.
func relayMemoryLimit(base, streams int64) int64 {
	return base + streams*memoryPerDownstream
}

// serve listens on --serve-edges and serves until ctx ends; the reports and the list of live
// edges run until background ends (after the HTTP server has drained).
func (r *relaying) serve(ctx context.Context, g *errgroup.Group, background context.Context, sp *spool.Spool) error {
	ln, err := net.Listen("tcp", r.cfg.ServeEdges)
	if err != nil {
		return err
	}
	opts := append(syncpb.ServerOptions(r.tls != nil),
		grpc.MaxRecvMsgSize(64<<20), // Ingest calls, as the control plane takes them
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))
	if r.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(r.tls)))
	}
	rs := relay.NewServer(r.upstream, r.holder, r.snapshots, r.members, r.auth, r.sessions, sp, r.log)
	if r.cfg.MemoryLimit > 0 {
		rs.OnWatching(func(streams int64) { debug.SetMemoryLimit(relayMemoryLimit(r.cfg.MemoryLimit, streams)) })
	}
	srv := rs.GRPCServer(opts...)
	r.log.Info("relay listening", "serve_edges_addr", ln.Addr().String(), "tls", r.tls != nil)
	g.Go(func() error {
		r.auth.Run(background)
		return nil
	})
	g.Go(func() error {
		r.sessions.Run(background)
		return nil
	})
	g.Go(func() error {
		<-background.Done()
		r.members.Close() // writes the membership changes not yet on disk
		return nil
	})
	g.Go(func() error { return srv.Serve(ln) })
	g.Go(func() error {
		<-ctx.Done()
		srv.Stop() // the edges behind move to their next upstream
		return nil
	})
	return nil
}

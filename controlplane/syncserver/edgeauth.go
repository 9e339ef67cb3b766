package syncserver

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/edgeauth"
)

// EdgeAuth admits only edges with a live credential to the sync service: every call carries
// "authorization: Bearer <edge token>", checked against the live edges' token hashes held in
// memory (no database round trip per call). The set is refreshed every RefreshInterval, and
// the streams of an edge that is no longer live (revoked) are closed then.
type EdgeAuth struct {
	edges controlplane.EdgeService
	log   *slog.Logger
	// RefreshInterval is how often the live edges are read again: it bounds how long a
	// revoked edge keeps its streams. 500 ms is one small query per replica, twice a second.
	RefreshInterval time.Duration

	live       atomic.Pointer[map[[sha256.Size]byte]*controlplane.Edge]
	reloadMu   sync.Mutex // serialises reloads and guards lastReload
	lastReload time.Time

	streams *edgeauth.Streams

	connected *prometheus.GaugeVec
	refused   prometheus.Counter
}

// NewEdgeAuth returns the authenticator over edges. Run keeps it current.
func NewEdgeAuth(edges controlplane.EdgeService, log *slog.Logger, reg prometheus.Registerer) *EdgeAuth {
	a := &EdgeAuth{edges: edges, log: log, RefreshInterval: 500 * time.Millisecond, streams: edgeauth.NewStreams(log),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flagedge_controlplane_connected_edges",
			Help: "Snapshot streams open to this replica, by edge name."}, []string{"edge"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_controlplane_edge_auth_failures_total",
			Help: "Sync calls refused for a missing, unknown or revoked edge token."}),
	}
	empty := map[[sha256.Size]byte]*controlplane.Edge{}
	a.live.Store(&empty)
	if reg != nil {
		reg.MustRegister(a.connected, a.refused)
	}
	return a
}

// Run refreshes the live edges until ctx ends, closing the streams of revoked edges.
func (a *EdgeAuth) Run(ctx context.Context) {
	t := time.NewTicker(a.RefreshInterval)
	defer t.Stop()
	for {
		if err := a.reload(ctx, 0); err != nil && ctx.Err() == nil {
			a.log.Warn("read live edges", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reload reads the live edges unless they were read less than notWithin ago, and closes the
// streams of edges no longer among them.
func (a *EdgeAuth) reload(ctx context.Context, notWithin time.Duration) error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	if notWithin > 0 && time.Since(a.lastReload) < notWithin {
		return nil
	}
	// The attempt counts, failed or not: a failing database must not be queried once per call.
	a.lastReload = time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	live, err := a.edges.LiveEdgeTokens(ctx)
	if err != nil {
		return err
	}
	a.live.Store(&live)
	ids := make(map[string]bool, len(live))
	for _, e := range live {
		ids[e.ID] = true
	}
	a.streams.Cut(func(id string) bool { return ids[id] })
	return nil
}

// authenticate returns the edge whose token the call carries. A token not seen yet (an edge
// issued a moment ago) makes the live set be read again, at most every 50 ms, so that calls
// with unknown tokens cannot load the database more than that.
func (a *EdgeAuth) authenticate(ctx context.Context) (*controlplane.Edge, error) {
	token := edgeauth.Token(ctx)
	if token == "" {
		a.refused.Inc()
		return nil, edgeauth.ErrUnauthenticated
	}
	sum := sha256.Sum256([]byte(token))
	if e := (*a.live.Load())[sum]; e != nil {
		return e, nil
	}
	if err := a.reload(ctx, 50*time.Millisecond); err != nil {
		return nil, status.Errorf(codes.Unavailable, "read live edges: %v", err)
	}
	if e := (*a.live.Load())[sum]; e != nil {
		return e, nil
	}
	a.refused.Inc()
	return nil, edgeauth.ErrUnauthenticated
}

// UnaryInterceptor admits unary calls (look-ups, ingestion, acknowledgements) from live
// edges only; the handler finds the edge in its context (edgeName).
func (a *EdgeAuth) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		edge, err := a.authenticate(ctx)
		if err != nil {
			return nil, err
		}
		return handler(context.WithValue(ctx, edgeKey{}, edge), req)
	}
}

// StreamInterceptor admits streams from live edges only, and ends them with Unauthenticated
// once the edge is revoked.
func (a *EdgeAuth) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		edge, err := a.authenticate(ss.Context())
		if err != nil {
			return err
		}
		// A gone edge (revoked, renamed, retired) leaves no series behind.
		counted := func(open int) {
			if open == 0 {
				a.connected.DeleteLabelValues(edge.Name)
			} else {
				a.connected.WithLabelValues(edge.Name).Set(float64(open))
			}
		}
		return a.streams.Serve(context.WithValue(ss.Context(), edgeKey{}, edge), ss, edge.ID, edge.Name, counted,
			func(ss grpc.ServerStream) error { return handler(srv, ss) })
	}
}

// edgeKey keys the authenticated edge in a call's context.
type edgeKey struct{}

// serves reports whether the edge whose credential the call carries is served the project:
// always when the server runs without EdgeAuth.
func serves(ctx context.Context, projectID int64) bool {
	e, ok := ctx.Value(edgeKey{}).(*controlplane.Edge)
	return !ok || e.Serves(projectID)
}

// scope is the project test of the call's edge for the membership hub: nil serves every
// project.
func scope(ctx context.Context) func(int64) bool {
	if e, ok := ctx.Value(edgeKey{}).(*controlplane.Edge); ok && e.Projects != nil {
		return e.Serves
	}
	return nil
}

// edgeName is the name of the edge whose credential the call carries ("" when the server runs
// without EdgeAuth, as in tests): the edge's own --edge-id is what it says, this is what the
// control plane issued.
func edgeName(ctx context.Context) string {
	if e, ok := ctx.Value(edgeKey{}).(*controlplane.Edge); ok {
		return e.Name
	}
	return ""
}

package relay

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/shared/edgeauth"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// PollInterval is how often the relay asks its upstream for the live edges: it bounds how
// long a revoked edge keeps its streams behind the relay (the control plane reads its own
// list afresh when a relay asks, so a revocation is cut within about 200 ms per tier).
const PollInterval = 200 * time.Millisecond

// Auth admits downstream edges with a live token: it mirrors the live edges its upstream
// lists (ListEdges), each with the projects it may receive through this relay, checks every
// call against the mirror (no round trip per call), and closes the streams of edges that
// leave it. The mirror is kept on disk, so that a relay restarted while its upstream is down
// still admits the edges behind it.
type Auth struct {
	upstream syncpb.SyncClient
	file     string // where the mirror is kept; "" for none
	log      *slog.Logger

	live        atomic.Pointer[map[[sha256.Size]byte]*syncpb.LiveEdge]
	pollMu      sync.Mutex // serialises polls; guards fingerprint and lastPoll
	fingerprint []byte
	lastPoll    time.Time

	streams *edgeauth.Streams
}

// NewAuth returns the authenticator of the edges behind the relay, its mirror read from file
// (in the relay's data directory) when there is one.
func NewAuth(upstream syncpb.SyncClient, file string, log *slog.Logger) *Auth {
	a := &Auth{upstream: upstream, file: file, log: log, streams: edgeauth.NewStreams(log)}
	empty := map[[sha256.Size]byte]*syncpb.LiveEdge{}
	a.live.Store(&empty)
	if data, err := os.ReadFile(file); err == nil {
		var kept syncpb.ListEdgesResponse
		if err := proto.Unmarshal(data, &kept); err != nil {
			log.Warn("the kept list of live edges cannot be read; waiting for the upstream's", "file", file, "err", err)
		} else {
			a.install(kept.Edges)
		}
	}
	return a
}

// Run polls the upstream's live edges every PollInterval until ctx ends.
func (a *Auth) Run(ctx context.Context) {
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	failing := false
	for {
		err := a.poll(ctx, 0)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			a.log.Warn("read the live edges from upstream; admitting those last known", "err", err)
			failing = true
		case err == nil && failing:
			a.log.Info("reading the live edges from upstream again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll reads the live edges unless they were read less than notWithin ago, installs them
// when they changed, and closes the streams of edges no longer among them.
func (a *Auth) poll(ctx context.Context, notWithin time.Duration) error {
	a.pollMu.Lock()
	defer a.pollMu.Unlock()
	if notWithin > 0 && time.Since(a.lastPoll) < notWithin {
		return nil
	}
	a.lastPoll = time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	resp, err := a.upstream.ListEdges(ctx, &syncpb.ListEdgesRequest{Fingerprint: a.fingerprint})
	if err != nil {
		return err
	}
	if resp.Unchanged {
		return nil
	}
	a.fingerprint = resp.Fingerprint
	a.install(resp.Edges)
	if a.file != "" {
		data, err := proto.Marshal(&syncpb.ListEdgesResponse{Edges: resp.Edges})
		if err == nil {
			err = writeFileAtomic(a.file, data)
		}
		if err != nil {
			a.log.Warn("keep the list of live edges", "file", a.file, "err", err)
		}
	}
	return nil
}

// install replaces the mirror and closes the streams of edges that left it.
func (a *Auth) install(edges []*syncpb.LiveEdge) {
	live := make(map[[sha256.Size]byte]*syncpb.LiveEdge, len(edges))
	ids := make(map[string]bool, len(edges))
	for _, e := range edges {
		if len(e.TokenSha256) == sha256.Size {
			live[[sha256.Size]byte(e.TokenSha256)] = e
			ids[e.Id] = true
		}
	}
	a.live.Store(&live)
	a.streams.Cut(func(id string) bool { return ids[id] })
}

// list returns the mirror as the caller may pass it on: each edge with the projects it may
// receive through caller too; those that may receive none are left out.
func (a *Auth) list(caller *syncpb.LiveEdge) []*syncpb.LiveEdge {
	var out []*syncpb.LiveEdge
	for _, e := range *a.live.Load() {
		le := &syncpb.LiveEdge{TokenSha256: e.TokenSha256, Id: e.Id, Name: e.Name}
		switch {
		case caller.AllProjects:
			le.AllProjects, le.Projects = e.AllProjects, e.Projects
		case e.AllProjects:
			le.Projects = caller.Projects
		default:
			for _, p := range e.Projects {
				if slices.Contains(caller.Projects, p) {
					le.Projects = append(le.Projects, p)
				}
			}
		}
		if le.AllProjects || len(le.Projects) > 0 {
			out = append(out, le)
		}
	}
	syncpb.SortLiveEdges(out)
	return out
}

// authenticate returns the edge whose token the call carries. A token not in the mirror (an
// edge issued a moment ago) makes the relay ask its upstream again, at most every 50 ms.
func (a *Auth) authenticate(ctx context.Context) (*syncpb.LiveEdge, error) {
	token := edgeauth.Token(ctx)
	if token == "" {
		return nil, edgeauth.ErrUnauthenticated
	}
	sum := sha256.Sum256([]byte(token))
	if e := (*a.live.Load())[sum]; e != nil {
		return e, nil
	}
	if err := a.poll(ctx, 50*time.Millisecond); err != nil {
		a.log.Debug("read the live edges from upstream", "err", err)
	}
	if e := (*a.live.Load())[sum]; e != nil {
		return e, nil
	}
	return nil, edgeauth.ErrUnauthenticated
}

// edgeKey keys the authenticated downstream edge in a call's context.
type edgeKey struct{}

// caller returns the downstream edge a call was admitted for.
func caller(ctx context.Context) *syncpb.LiveEdge {
	e, _ := ctx.Value(edgeKey{}).(*syncpb.LiveEdge)
	return e
}

// serves reports whether the edge may receive the project through this relay.
func serves(e *syncpb.LiveEdge, projectID int64) bool {
	return e.AllProjects || slices.Contains(e.Projects, projectID)
}

// UnaryInterceptor admits unary calls from live edges only.
func (a *Auth) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		edge, err := a.authenticate(ctx)
		if err != nil {
			return nil, err
		}
		return handler(context.WithValue(ctx, edgeKey{}, edge), req)
	}
}

// StreamInterceptor admits streams from live edges only, and ends them with Unauthenticated
// once the edge leaves the upstream's list (revoked).
func (a *Auth) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		edge, err := a.authenticate(ss.Context())
		if err != nil {
			return err
		}
		return a.streams.Serve(context.WithValue(ss.Context(), edgeKey{}, edge), ss, edge.Id, edge.Name, nil,
			func(ss grpc.ServerStream) error { return handler(srv, ss) })
	}
}

// writeFileAtomic writes data to path through a temporary file, fsynced and renamed.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

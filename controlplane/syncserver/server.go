// Package syncserver is the control plane's gRPC sync service: it streams project snapshots
// to the edges, driven by Postgres LISTEN/NOTIFY, answers their person and group look-ups,
// records experience-continuity hash-key overrides, and ingests the events they forward.
package syncserver

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	gproto "google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/bloomhub"
	"github.com/flagedge/flagedge/controlplane/ingest"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// snapshotsPerMessage bounds a Watch message: an initial sync of many projects is sent in
// several messages rather than one that could exceed gRPC's message size limit.
const snapshotsPerMessage = 64

// Server implements syncpb.SyncServer.
type Server struct {
	syncpb.UnimplementedSyncServer
	snapshots controlplane.SnapshotStore
	persons   controlplane.PersonStore
	ingester  Ingester
	log       *slog.Logger

	mu   sync.Mutex // guards subs
	subs map[*subscriber]struct{}

	builds singleflight.Group
	cache  sync.Map // project id → *encodedSnapshot, the latest built

	members *bloomhub.Hub // nil: no membership filters are sent

	versions freshReads             // the project versions, one read for the streams asking at once
	dbID     atomic.Pointer[string] // the database's identity, read once (again after Resync)

	evaluations controlplane.EvaluationStore // nil: evaluation reports are dropped

	relays *EdgeAuth // nil: edges may not serve edges

	sessions  controlplane.EdgeSessionStore         // nil: streams are not recorded
	opens     batcher[controlplane.SessionOpening]  // sessions to open
	closes    batcher[string]                       // sessions to close
	acks      batcher[controlplane.Acknowledgement] // acknowledgements to write
	replicaID string
	replica   atomic.Pointer[string] // this replica's name for people

	watching atomic.Int64 // the streams open now: the acknowledgement delay, and a gauge
	sent     prometheus.Counter
}

// Ingester stores batches decoded by ingest.Decode in one transaction, returning once it has
// committed (ingest.Ingester: the one owner of ingestion, which the event log's consumer calls
// too).
type Ingester interface {
	IngestBatches(ctx context.Context, batches []controlplane.EventBatch) (controlplane.IngestResult, error)
}

// Option configures a Server.
type Option func(*Server)

// WithMembership makes Watch streams carry the membership filters of hub. Without it no
// filter is sent, and edges look up every key their flags need.
func WithMembership(hub *bloomhub.Hub) Option { return func(s *Server) { s.members = hub } }

// NewServer returns a sync server. Call Notify for each change and Resync after missed ones.
func NewServer(snapshots controlplane.SnapshotStore, persons controlplane.PersonStore, ingester Ingester, log *slog.Logger, reg prometheus.Registerer, opts ...Option) *Server {
	s := &Server{snapshots: snapshots, persons: persons, ingester: ingester, log: log, subs: map[*subscriber]struct{}{},
		sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_controlplane_snapshots_sent_total", Help: "Project snapshots sent to edges."}),
	}
	if reg != nil {
		reg.MustRegister(s.sent, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_controlplane_watch_streams", Help: "Edges watching snapshots."},
			func() float64 { return float64(s.watching.Load()) }))
	}
	s.versions.read = snapshots.ProjectVersions
	for _, o := range opts {
		o(s)
	}
	return s
}

// databaseID is the database's identity: it changes only when the database is replaced,
// which breaks the LISTEN connection and so comes with a Resync, which forgets it.
func (s *Server) databaseID(ctx context.Context) (string, error) {
	if id := s.dbID.Load(); id != nil {
		return *id, nil
	}
	id, err := s.snapshots.DatabaseID(ctx)
	if err != nil {
		return "", err
	}
	s.dbID.Store(&id)
	return id, nil
}

// subscriber is one Watch stream's queue of projects to look at. It coalesces: however many
// changes arrive, it holds each project once, so it is bounded by the number of projects.
type subscriber struct {
	serves  func(int64) bool // the edge's projects; nil: every project
	mu      sync.Mutex       // guards pending and all
	pending map[int64]int64  // project id → the newest version announced
	all     bool             // look at every project (after missed notifications)
	wake    chan struct{}    // capacity 1
}

func (sub *subscriber) mark(projectID, version int64, all bool) {
	if !all && sub.serves != nil && !sub.serves(projectID) {
		return
	}
	sub.mu.Lock()
	if all {
		sub.all = true
	} else {
		sub.pending[projectID] = max(sub.pending[projectID], version)
	}
	sub.mu.Unlock()
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

func (sub *subscriber) take() (wants map[int64]int64, all bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	wants = sub.pending
	sub.pending = map[int64]int64{}
	all, sub.all = sub.all, false
	return wants, all
}

// Notify handles a snapshot NOTIFY payload, "<project id>:<version>".
func (s *Server) Notify(payload string) {
	idText, versionText, _ := strings.Cut(payload, ":")
	id, err := strconv.ParseInt(idText, 10, 64)
	version, verr := strconv.ParseInt(versionText, 10, 64)
	if err != nil || verr != nil {
		s.log.Warn("bad snapshot notification", "payload", payload)
		return
	}
	if s.members != nil {
		s.members.Ensure(id)
	}
	s.broadcast(id, version, false)
}

// Resync makes every stream compare all project versions again: notifications may have been
// missed.
func (s *Server) Resync() {
	// The database may have been restored meanwhile: cached snapshots may be of versions it
	// no longer has, and be another database.
	s.cache.Clear()
	s.dbID.Store(nil)
	s.broadcast(0, 0, true)
}

func (s *Server) broadcast(projectID, version int64, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		sub.mark(projectID, version, all)
	}
}

// Watch streams snapshots: first whatever the edge lacks, then every change.
func (s *Server) Watch(req *syncpb.WatchRequest, stream syncpb.Sync_WatchServer) error {
	if req.ProtocolVersion != syncpb.ProtocolVersion_PROTOCOL_VERSION_1 {
		return status.Errorf(codes.FailedPrecondition, "unsupported protocol version %d", req.ProtocolVersion)
	}
	ctx := stream.Context()
	sub := &subscriber{serves: scope(ctx), pending: map[int64]int64{}, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	s.watching.Add(1)
	defer func() {
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
		s.watching.Add(-1)
	}()
	s.log.Info("edge watching", "edge", edgeName(stream.Context()), "edge_id", req.EdgeId, "known_projects", len(req.KnownVersions))

	dbID, err := s.databaseID(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "read database identity: %v", err)
	}
	// sent is what the edge holds. Versions from another database mean nothing here: the
	// edge's projects are then all to be replaced (0) or removed.
	sent := make(map[int64]int64, len(req.KnownVersions))
	for id, v := range req.KnownVersions {
		if req.DatabaseId != dbID {
			v = 0
		}
		sent[id] = v
	}
	if req.DatabaseId != dbID && len(req.KnownVersions) > 0 {
		s.log.Warn("edge holds snapshots of another database; sending everything afresh", "edge_id", req.EdgeId,
			"edge_database_id", req.DatabaseId, "database_id", dbID)
	}
	// The edge drops the filters it kept from its last stream before it may count itself
	// connected again (after this stream's catch-up): keys stored while it was away were not
	// announced to it. The filters follow the catch-up.
	sessionID, closeSession, err := s.openSession(ctx, req)
	if err != nil {
		return status.Errorf(codes.Unavailable, "record the stream: %v", err)
	}
	defer closeSession()
	if err := stream.Send(&syncpb.WatchResponse{DatabaseId: dbID, MembershipReset: s.members != nil, SessionId: sessionID,
		AckDelayMs: s.ackDelayMs()}); err != nil {
		return err
	}
	// The membership queue starts with a reset and every filter: sent once the snapshots are.
	var members *bloomhub.Sub
	var membersWake <-chan struct{}
	if s.members != nil {
		members = s.members.Subscribe(sub.serves)
		defer s.members.Unsubscribe(members)
		membersWake = members.Wake()
	}
	// Subscribed before reading versions: a change made meanwhile is seen twice, never lost.
	deflated := req.AcceptsDeflatedSnapshots
	if err := s.syncAll(ctx, stream, sub.serves, sent, deflated, true); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-membersWake:
			if err := sendMembership(stream, members.Take()); err != nil {
				return err
			}
			continue
		case <-sub.wake:
		}
		wants, all := sub.take()
		var err error
		if all {
			err = s.syncAll(ctx, stream, sub.serves, sent, deflated, false)
		} else {
			err = s.send(ctx, stream, sent, wants, &syncpb.WatchResponse{}, deflated, false)
		}
		if err != nil {
			return err
		}
	}
}

// ackDelayPerStream is about what sending a change to one more edge costs this replica (38 µs
// of CPU measured with 10,000 edges: TLS and the kernel's send). An edge waits at least the
// number of streams times this before acknowledging a change, by when the replica has
// usually sent it to every edge; at most twice that, so the acknowledgements arrive spread
// out. Each acknowledgement is a call of its own (~120 µs): 10,000 of them arriving during
// the fan-out doubled the time the change took to reach the last edges.
const (
	ackDelayPerStream = 40 * time.Microsecond
	maxAckDelay       = 5 * time.Second
)

// ackDelayMs is the acknowledgement delay the replica asks of its edges now (the
// WatchResponse's ack_delay_ms): 0 for fewer than 25 edges and 4 ms for a hundred, so that a
// rollout to a few edges is confirmed within milliseconds; 400 ms for 10,000.
func (s *Server) ackDelayMs() uint32 {
	return uint32(min(time.Duration(s.watching.Load())*ackDelayPerStream, maxAckDelay) / time.Millisecond)
}

// syncAll makes the edge hold exactly what the database holds of the projects it is served
// (every project when serves is nil): it sends every project whose version differs from what
// the edge has — newer, or older as after a restore from a backup — and removes the projects
// the database does not have or the edge is not served. deflated sends the snapshots
// compressed (the edge accepts them so).
func (s *Server) syncAll(ctx context.Context, stream syncpb.Sync_WatchServer, serves func(int64) bool, sent map[int64]int64, deflated, initial bool) error {
	all, err := s.versions.get(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "read project versions: %v", err)
	}
	versions := all // shared with other streams: filtered into a copy
	if serves != nil {
		versions = make(map[int64]int64, len(all))
		for id, v := range all {
			if serves(id) {
				versions[id] = v
			}
		}
	}
	wants := map[int64]int64{}
	for id, v := range versions {
		if v != sent[id] {
			wants[id] = v
			if v < sent[id] {
				sent[id] = 0 // the edge's copy is not the database's: replace it
			}
		}
	}
	msg := &syncpb.WatchResponse{}
	for id := range sent {
		if _, ok := versions[id]; !ok {
			msg.RemovedProjects = append(msg.RemovedProjects, id)
			delete(sent, id)
		}
	}
	return s.send(ctx, stream, sent, wants, msg, deflated, initial)
}

// send sends the snapshots of the wanted projects (id → at least this version) that are
// newer than what was sent, and msg's removals; initial marks the end of the catch-up. The
// snapshots go as the bytes encoded once per version (encoded.go), after msg's own fields:
// compressed when deflated.
func (s *Server) send(ctx context.Context, stream syncpb.Sync_WatchServer, sent, wants map[int64]int64, msg *syncpb.WatchResponse, deflated, initial bool) error {
	var snaps [][]byte
	flush := func(last bool) error {
		if !last && len(snaps) < snapshotsPerMessage {
			return nil
		}
		if len(snaps) == 0 && len(msg.RemovedProjects) == 0 && !(last && initial) {
			return nil
		}
		msg.InitialSyncDone = last && initial
		if len(snaps) > 0 {
			msg.AckDelayMs = s.ackDelayMs()
		}
		head, err := gproto.Marshal(msg)
		if err != nil {
			return status.Errorf(codes.Internal, "encode watch response: %v", err)
		}
		if err := stream.SendMsg(&syncpb.EncodedResponse{Parts: append([][]byte{head}, snaps...)}); err != nil {
			return err
		}
		s.sent.Add(float64(len(snaps)))
		*msg, snaps = syncpb.WatchResponse{}, snaps[:0]
		return nil
	}
	for id, want := range wants {
		if want <= sent[id] {
			continue
		}
		snap, err := s.snapshot(ctx, id, want)
		if controlplane.ErrorKind(err) == controlplane.NotFound {
			if _, had := sent[id]; had {
				msg.RemovedProjects = append(msg.RemovedProjects, id)
				delete(sent, id)
			}
			continue
		}
		if err != nil {
			return status.Errorf(codes.Unavailable, "build snapshot %d: %v", id, err)
		}
		if snap.version <= sent[id] {
			continue
		}
		snaps = append(snaps, snap.encoding(deflated))
		sent[id] = snap.version
		if err := flush(false); err != nil {
			return err
		}
	}
	return flush(true)
}

// snapshotBuildTimeout bounds one snapshot build. The build is shared by every stream that
// asks for the project meanwhile, so it runs detached from the stream that started it (one
// edge going away must not fail the others); the bound keeps a build against a stuck
// database from running forever. Building a large project takes well under a second.
const snapshotBuildTimeout = 30 * time.Second

// snapshot returns the project's snapshot at version want or newer: from the cache when it
// holds one, else built once however many streams ask at the same time. A caller whose
// stream ends stops waiting; the build carries on for the others.
func (s *Server) snapshot(ctx context.Context, id, want int64) (*encodedSnapshot, error) {
	if cached, ok := s.cache.Load(id); ok && cached.(*encodedSnapshot).version >= want {
		return cached.(*encodedSnapshot), nil
	}
	// A build already under way may have read the database before version want committed:
	// then one more build, which cannot have.
	for attempt := 0; ; attempt++ {
		pb, err := s.build(ctx, id)
		if err != nil || pb.version >= want || attempt == 1 {
			return pb, err
		}
	}
}

// build builds and encodes the project's snapshot, once for every stream that asks
// meanwhile.
func (s *Server) build(ctx context.Context, id int64) (*encodedSnapshot, error) {
	buildCtx := context.WithoutCancel(ctx)
	key := strconv.FormatInt(id, 10)
	ch := s.builds.DoChan(key, func() (any, error) {
		ctx, cancel := context.WithTimeout(buildCtx, snapshotBuildTimeout)
		defer cancel()
		built, err := s.snapshots.BuildSnapshot(ctx, id)
		if err != nil {
			if controlplane.ErrorKind(err) == controlplane.NotFound {
				s.cache.Delete(id)
			}
			return nil, err
		}
		enc, err := encodeSnapshot(SnapshotMessage(built))
		if err != nil {
			return nil, err
		}
		s.cache.Store(id, enc)
		return enc, nil
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*encodedSnapshot), nil
	}
}

// SnapshotMessage is a project snapshot as the sync service sends it, and as `controlplane
// snapshots export` bundles it.
func SnapshotMessage(s *controlplane.ProjectSnapshot) *syncpb.ProjectSnapshot {
	pb := &syncpb.ProjectSnapshot{
		ProjectId: s.ProjectID, Version: s.Version, Name: s.Name, ApiToken: s.APIToken,
		SecretTokenSha256: s.SecretTokenSHA256, ReadKeySha256: s.ReadKeySHA256, OtherKeySha256: s.OtherKeySHA256,
		GroupTypes: map[int32]string{}, BuiltAtUnixMs: s.BuiltAt.UnixMilli(),
	}
	for _, f := range s.Flags {
		pb.Flags = append(pb.Flags, &syncpb.Flag{Id: f.ID, Key: f.Key, Name: f.Name, Active: f.Active, Version: int32(f.Version),
			EnsureExperienceContinuity: f.EnsureExperienceContinuity, Filters: f.Filters,
			EvaluationRuntime: f.EvaluationRuntime, EvaluationTags: f.EvaluationTags, BucketingIdentifier: f.BucketingIdentifier})
	}
	for _, c := range s.Cohorts {
		pb.Cohorts = append(pb.Cohorts, &syncpb.Cohort{Id: c.ID, IsStatic: c.Static, Filters: c.Filters})
	}
	for _, g := range s.GroupTypes {
		pb.GroupTypes[int32(g.Index)] = g.GroupType
	}
	c := s.ClientConfig
	pb.ClientConfig = &syncpb.ClientConfig{AutocaptureOptOut: c.AutocaptureOptOut, SessionRecordingOptIn: c.SessionRecordingOptIn,
		HeatmapsOptIn: c.HeatmapsOptIn, CaptureConsoleLogOptIn: c.CaptureConsoleLogOptIn,
		CapturePerformanceOptIn: c.CapturePerformanceOptIn, AutocaptureExceptionsOptIn: c.AutocaptureExceptionsOptIn}
	for _, f := range s.Features {
		pb.EarlyAccessFeatures = append(pb.EarlyAccessFeatures, &syncpb.EarlyAccessFeature{Id: f.ID, Name: f.Name,
			Description: f.Description, Stage: f.Stage, DocumentationUrl: f.DocumentationURL, FlagKey: f.FlagKey,
			CreatedAtUnixMs: f.CreatedAt.UnixMilli()})
	}
	return pb
}

// checkScope refuses a call about a project the calling edge is not served. The edge never
// held that project's tokens, so only a misbehaving or altered edge asks: PermissionDenied,
// which it does not retry as if the control plane were away.
func checkScope(ctx context.Context, projectID int64) error {
	if serves(ctx, projectID) {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "this edge is not served project %d", projectID)
}

// lookupTimeout bounds a look-up's database work; the edge waits less than this anyway.
const lookupTimeout = 2 * time.Second

// LookupPerson returns what is stored about the person behind a distinct id.
func (s *Server) LookupPerson(ctx context.Context, req *syncpb.LookupPersonRequest) (*syncpb.LookupPersonResponse, error) {
	if err := checkScope(ctx, req.ProjectId); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	p, err := s.persons.LookupPerson(ctx, req.ProjectId, req.DistinctId)
	if err != nil {
		return nil, s.unavailable("lookup person", err)
	}
	if p == nil {
		return &syncpb.LookupPersonResponse{}, nil
	}
	return &syncpb.LookupPersonResponse{Found: true, Properties: p.Properties, StaticCohortIds: p.StaticCohortIDs,
		HashKeyOverrides: p.HashKeyOverrides}, nil
}

// LookupGroups returns the stored properties of the requested groups that exist.
func (s *Server) LookupGroups(ctx context.Context, req *syncpb.LookupGroupsRequest) (*syncpb.LookupGroupsResponse, error) {
	if err := checkScope(ctx, req.ProjectId); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	refs := make([]controlplane.GroupRef, len(req.Groups))
	for i, g := range req.Groups {
		refs[i] = controlplane.GroupRef{TypeIndex: int(g.GroupTypeIndex), Key: g.GroupKey}
	}
	groups, err := s.persons.LookupGroups(ctx, req.ProjectId, refs)
	if err != nil {
		return nil, s.unavailable("lookup groups", err)
	}
	out := &syncpb.LookupGroupsResponse{}
	for _, g := range groups {
		out.Groups = append(out.Groups, &syncpb.GroupProperties{GroupTypeIndex: int32(g.TypeIndex), GroupKey: g.Key, Properties: g.Properties})
	}
	return out, nil
}

// SetHashKeyOverrides records experience-continuity overrides, first write wins.
func (s *Server) SetHashKeyOverrides(ctx context.Context, req *syncpb.SetHashKeyOverridesRequest) (*syncpb.SetHashKeyOverridesResponse, error) {
	if req.DistinctId == "" || req.HashKey == "" {
		return nil, status.Error(codes.InvalidArgument, "distinct_id and hash_key are required")
	}
	if err := checkScope(ctx, req.ProjectId); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	overrides, err := s.persons.SetHashKeyOverrides(ctx, req.ProjectId, req.DistinctId, req.HashKey, req.FlagKeys)
	if err != nil {
		return nil, s.unavailable("set hash key overrides", err)
	}
	return &syncpb.SetHashKeyOverridesResponse{HashKeyOverrides: overrides}, nil
}

func (s *Server) unavailable(op string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.Errorf(codes.DeadlineExceeded, "%s: %v", op, err)
	}
	s.log.Error(op, "err", err)
	return status.Errorf(codes.Unavailable, "%s failed", op)
}

// Ingest hands the batches to the ingester, which stores their events, each once, and
// applies them to persons and groups. It answers only once everything is stored: the edge
// then drops the batches. An event that can never be stored (PostgreSQL refuses its content,
// or it cannot be decoded) is dead-lettered and counted, and the call still succeeds, so that
// the edge moves on; any other failure answers Unavailable and the edge sends them again.
func (s *Server) Ingest(ctx context.Context, req *syncpb.IngestRequest) (*syncpb.IngestResponse, error) {
	// The scope is checked on the decoded batches, and those same batches are stored: one
	// reader of each batch's project (ingest.Decode), so no encoding can show the check one
	// project and the store another. A batch of a project the edge is not served, or whose
	// project cannot be read (Decode gives 0), fails the call for good (FailedPrecondition):
	// the edge splits the call and moves that record to its dead-letter file, storing the rest.
	batches := make([]controlplane.EventBatch, len(req.Batches))
	for i, raw := range req.Batches {
		batches[i] = ingest.Decode(raw, req.EdgeId)
		if id := batches[i].ProjectID; !serves(ctx, id) {
			return nil, status.Errorf(codes.FailedPrecondition, "this edge is not served project %d: its events are refused", id)
		}
	}
	res, err := s.ingester.IngestBatches(ctx, batches)
	if err != nil {
		return nil, s.unavailable("ingest", err)
	}
	return &syncpb.IngestResponse{Stored: int64(res.Stored), Duplicates: int64(res.Duplicates)}, nil
}

package syncserver_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/ingest"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/postgres/postgrestest"
	"github.com/flagedge/flagedge/controlplane/syncserver"
	"github.com/flagedge/flagedge/internal/pgtest"
	"github.com/flagedge/flagedge/shared/syncpb"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		os.Exit(m.Run()) // a fuzz worker runs only fuzz targets, which need no database
	}
	os.Exit(pgtest.Main(m, postgres.Migrate))
}

// env is a sync server on a real database, served over gRPC on 127.0.0.1.
type env struct {
	db      *postgres.DB
	project int64
	client  syncpb.SyncClient
	reg     *prometheus.Registry
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db, res, _ := postgrestest.Open(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	srv := syncserver.NewServer(postgres.NewSnapshotStore(db), postgres.NewPersonStore(db), ingest.New(postgres.NewEventStore(db, log), log, reg), log, reg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(syncpb.ServerOptions(false)...)
	syncpb.RegisterSyncServer(g, srv)
	go g.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &env{db: db, project: res.ProjectID, client: syncpb.NewSyncClient(conn), reg: reg}
}

// rawEvent encodes a CapturedEvent field by field, so that it may hold what proto.Marshal
// refuses to write (strings that are not UTF-8), as a misbehaving edge could send.
func rawEvent(id, name, distinctID, props string, timestampUs int64) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, id)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendString(b, distinctID)
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendString(b, props)
	b = protowire.AppendTag(b, 5, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(timestampUs))
	b = protowire.AppendTag(b, 6, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(time.Now().UnixMicro()))
	return b
}

// rawBatch encodes an EventBatch of already encoded events.
func rawBatch(projectID int64, events [][]byte) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(projectID))
	for _, e := range events {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	return b
}

func goodEvent(t *testing.T, i int) []byte {
	t.Helper()
	props, _ := json.Marshal(map[string]any{"n": i, "$set": map[string]any{"seen": i}})
	raw, err := proto.Marshal(&syncpb.CapturedEvent{Uuid: uuid.NewString(), Event: "$pageview", DistinctId: fmt.Sprintf("user-%d", i%50),
		Properties: props, TimestampUs: time.Now().UnixMicro(), ReceivedUs: time.Now().UnixMicro()})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestIngestPoisonOverGRPC sends, as an edge does, batches holding 999 good events, one of
// each poison (some of which proto.Marshal could not even write) and a batch that is not
// protobuf at all. The call succeeds, so the edge moves on; the good events are stored, the
// rest dead-lettered byte for byte and counted; later events are stored.
func TestIngestPoisonOverGRPC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	long := "" // uuids: random enough that PostgreSQL cannot compress them under its index row limit
	for len(long) < 5000 {
		long += uuid.NewString()
	}
	now := time.Now().UnixMicro()
	poisons := map[string][]byte{}
	for name, ev := range map[string][4]string{
		"NUL in a property value":           {"$pageview", "u1", `{"a":"x\u0000y"}`},
		"NUL in a property key":             {"$pageview", "u1", `{"a\u0000":"x"}`},
		"NUL in $set":                       {"$pageview", "u1", `{"$set":{"a":"\u0000"}}`},
		"NUL in distinct_id":                {"$pageview", "u\x00", `{}`},
		"NUL in the event name":             {"e\x00", "u1", `{}`},
		"raw 0xff in distinct_id":           {"$pageview", "u\xff", `{}`},
		"raw 0xff in the event name":        {"\xff", "u1", `{}`},
		"raw 0xff in a property":            {"$pageview", "u1", "{\"a\":\"\xff\"}"},
		"lone surrogate":                    {"$pageview", "u1", `{"a":"\ud800"}`},
		"number out of range":               {"$pageview", "u1", `{"a":1e200000}`},
		"5,000-character event name":        {long, "u1", `{}`},
		"5,000-character distinct_id":       {"$pageview", long, `{}`},
		"5,000-character $group_key":        {"$groupidentify", "u1", `{"$group_type":"company","$group_key":"` + long + `"}`},
		"5,000-character $group_type":       {"$groupidentify", "u1", `{"$group_type":"` + long + `","$group_key":"k"}`},
		"5,000-character alias":             {"$create_alias", "u1", `{"alias":"` + long + `"}`},
		"5,000-character $anon_distinct_id": {"$identify", "u1", `{"$anon_distinct_id":"` + long + `"}`},
	} {
		poisons[name] = rawEvent(uuid.NewString(), ev[0], ev[1], ev[2], now)
	}
	poisons["timestamp out of range"] = rawEvent(uuid.NewString(), "$pageview", "u1", `{}`, -1000000000000000*1000)
	poisons["truncated event"] = rawEvent(uuid.NewString(), "$pageview", "u1", `{}`, now)[:20]

	var events [][]byte
	for i := range 999 {
		events = append(events, goodEvent(t, i))
	}
	i := 0
	for _, p := range poisons {
		i += 50
		events = append(events[:i], append([][]byte{p}, events[i:]...)...)
	}
	req := &syncpb.IngestRequest{EdgeId: "edge-1", Batches: [][]byte{
		rawBatch(e.project, events[:500]),
		[]byte("\xff\xff\xff not protobuf"),
		rawBatch(e.project, events[500:]),
	}}
	resp, err := e.client.Ingest(ctx, req)
	if err != nil {
		t.Fatalf("ingest: %v", err)
	}
	if resp.Stored != 999 || resp.Duplicates != 0 {
		t.Errorf("stored %d, duplicates %d; want 999, 0", resp.Stored, resp.Duplicates)
	}
	wantDead := len(poisons) + 1 // and the undecodable batch
	var dead float64
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "flagedge_controlplane_dead_lettered_events_total" {
			for _, m := range mf.GetMetric() {
				dead += m.GetCounter().GetValue()
			}
		}
	}
	if int(dead) != wantDead {
		t.Errorf("dead-letter counter %v, want %d", dead, wantDead)
	}
	// Each poison is in the table as the edge sent it.
	for name, raw := range poisons {
		var n int
		if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters WHERE raw = $1 AND raw_format = 'sync.CapturedEvent' AND edge_id = 'edge-1'`,
			raw).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("%s: %d dead letters holding its bytes, want 1", name, n)
		}
	}
	var undecodable int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters WHERE sqlstate = 'undecodable'`).Scan(&undecodable); err != nil {
		t.Fatal(err)
	}
	if undecodable != 2 { // the truncated event and the batch that is not protobuf
		t.Errorf("%d undecodable dead letters, want 2", undecodable)
	}

	// Ingestion carries on: the next event is stored at once.
	resp, err = e.client.Ingest(ctx, &syncpb.IngestRequest{EdgeId: "edge-1", Batches: [][]byte{rawBatch(e.project, [][]byte{goodEvent(t, 1)})}})
	if err != nil || resp.Stored != 1 {
		t.Fatalf("the next event: %v, %v", resp, err)
	}
}

// TestIngestTransientIsUnavailable checks that a failure that is not the events' (the
// database gone) answers Unavailable, so that the edge keeps the batch and retries.
func TestIngestTransientIsUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.db.Close()
	_, err := e.client.Ingest(context.Background(), &syncpb.IngestRequest{EdgeId: "edge-1",
		Batches: [][]byte{rawBatch(e.project, [][]byte{goodEvent(t, 1)})}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("ingest with the database closed: %v, want Unavailable", err)
	}
}

// TestSnapshotBuildOutlivesFirstWatcher checks that a snapshot build shared by several
// streams survives the stream that started it going away: the build is held up (its tables
// locked), the first edge disconnects, a second edge waiting on the same build still gets
// its snapshot once the lock goes.
func TestSnapshotBuildOutlivesFirstWatcher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	lock, err := e.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx) //nolint:errcheck
	if _, err := lock.Exec(ctx, `LOCK TABLE feature_flags IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	watch := func(ctx context.Context, edge string) syncpb.Sync_WatchClient {
		t.Helper()
		stream, err := e.client.Watch(ctx, &syncpb.WatchRequest{ProtocolVersion: syncpb.ProtocolVersion_PROTOCOL_VERSION_1, EdgeId: edge})
		if err != nil {
			t.Fatal(err)
		}
		return stream
	}
	firstCtx, leave := context.WithCancel(ctx)
	defer leave()
	watch(firstCtx, "first")
	// Wait (bounded) until the first stream's build is blocked on the lock.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE c.relname = 'feature_flags' AND NOT l.granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the snapshot build never reached the locked table")
		}
		time.Sleep(20 * time.Millisecond)
	}
	secondCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	second := watch(secondCtx, "second")
	time.Sleep(300 * time.Millisecond) // the second stream joins the build in flight
	leave()
	time.Sleep(300 * time.Millisecond) // the first stream's end reaches the server
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	msg, err := recvCatchUp(second)
	if err != nil {
		t.Fatalf("second watcher: %v", err)
	}
	if len(msg.Snapshots) != 1 || msg.Snapshots[0].ProjectId != e.project || !msg.InitialSyncDone {
		t.Errorf("second watcher got %v", msg)
	}
}

// recvCatchUp reads a stream's first message (the database identity) and returns the next.
func recvCatchUp(stream syncpb.Sync_WatchClient) (*syncpb.WatchResponse, error) {
	first, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if first.DatabaseId == "" || len(first.Snapshots) > 0 {
		return nil, fmt.Errorf("first message %v, want the database identity alone", first)
	}
	return stream.Recv()
}

// catchUp watches with what an edge says it holds and returns the catch-up: projects sent by
// id and version, and projects removed.
func catchUp(t *testing.T, e *env, databaseID string, known map[int64]int64) (sent map[int64]int64, removed []int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.client.Watch(ctx, &syncpb.WatchRequest{ProtocolVersion: syncpb.ProtocolVersion_PROTOCOL_VERSION_1,
		EdgeId: "t", KnownVersions: known, DatabaseId: databaseID})
	if err != nil {
		t.Fatal(err)
	}
	sent = map[int64]int64{}
	msg, err := recvCatchUp(stream)
	for ; err == nil; msg, err = stream.Recv() {
		for _, s := range msg.Snapshots {
			sent[s.ProjectId] = s.Version
		}
		removed = append(removed, msg.RemovedProjects...)
		if msg.InitialSyncDone {
			return sent, removed
		}
	}
	t.Fatal(err)
	return nil, nil
}

// TestCatchUpIsExact: after the catch-up an edge holds exactly the database's projects,
// whatever it held before: newer versions (a restored backup) and another database's
// projects are replaced, unknown ones removed, equal ones left alone.
func TestCatchUpIsExact(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, err := postgres.NewSnapshotStore(e.db).DatabaseID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	versions, err := postgres.NewSnapshotStore(e.db).ProjectVersions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := versions[e.project]
	for _, c := range []struct {
		name        string
		databaseID  string
		known       map[int64]int64
		wantSent    map[int64]int64
		wantRemoved []int64
	}{
		{"new edge", "", nil, map[int64]int64{e.project: v}, nil},
		{"current edge", id, map[int64]int64{e.project: v}, map[int64]int64{}, nil},
		{"edge ahead (a restored backup)", id, map[int64]int64{e.project: v + 5}, map[int64]int64{e.project: v}, nil},
		{"edge with a project the database lacks", id, map[int64]int64{e.project: v, 999: 3}, map[int64]int64{}, []int64{999}},
		{"edge of another database, same version", "another", map[int64]int64{e.project: v, 999: 3}, map[int64]int64{e.project: v}, []int64{999}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sent, removed := catchUp(t, e, c.databaseID, c.known)
			if fmt.Sprint(sent) != fmt.Sprint(c.wantSent) || fmt.Sprint(removed) != fmt.Sprint(c.wantRemoved) {
				t.Errorf("sent %v removed %v, want %v and %v", sent, removed, c.wantSent, c.wantRemoved)
			}
		})
	}
}

// TestDeflatedSnapshots: an edge that accepts deflated snapshots gets the same snapshot as
// one that does not, compressed, labelled with its project and version — unless compressing
// does not make it smaller (a project without flags), when it gets it as it is.
func TestDeflatedSnapshots(t *testing.T) {
	e := newEnv(t)
	get := func(deflated bool) *syncpb.WatchResponse {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream, err := e.client.Watch(ctx, &syncpb.WatchRequest{ProtocolVersion: syncpb.ProtocolVersion_PROTOCOL_VERSION_1,
			EdgeId: "t", AcceptsDeflatedSnapshots: deflated})
		if err != nil {
			t.Fatal(err)
		}
		msg, err := recvCatchUp(stream)
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	if msg := get(true); len(msg.Snapshots) != 1 || len(msg.DeflatedSnapshots) != 0 {
		t.Fatalf("a project without flags: %d snapshots, %d deflated; want it as it is", len(msg.Snapshots), len(msg.DeflatedSnapshots))
	}

	ctx := context.Background()
	actor, err := postgres.CreateUser(ctx, e.db, "admin@example.com", "flags@example.com", "", false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		key := fmt.Sprintf("flag-%d", i)
		filters := json.RawMessage(`{"groups": [{"properties": [{"key": "email", "type": "person", "value": ["a@example.com", "b@example.com"], "operator": "exact"}], "rollout_percentage": 50}]}`)
		if _, err := postgres.NewFlagService(e.db).CreateFlag(controlplane.NewContextWithUser(ctx, actor), e.project, controlplane.FlagUpdate{Key: &key, Filters: filters}); err != nil {
			t.Fatal(err)
		}
	}
	plain, deflated := get(false), get(true)
	if len(plain.Snapshots) != 1 || len(plain.DeflatedSnapshots) != 0 {
		t.Fatalf("without accepting deflated snapshots: %d snapshots, %d deflated; want 1 and 0", len(plain.Snapshots), len(plain.DeflatedSnapshots))
	}
	if len(deflated.Snapshots) != 0 || len(deflated.DeflatedSnapshots) != 1 {
		t.Fatalf("accepting deflated snapshots: %d snapshots, %d deflated; want 0 and 1", len(deflated.Snapshots), len(deflated.DeflatedSnapshots))
	}
	d := deflated.DeflatedSnapshots[0]
	want := plain.Snapshots[0]
	if d.ProjectId != want.ProjectId || d.Version != want.Version {
		t.Errorf("labelled project %d version %d, want %d and %d", d.ProjectId, d.Version, want.ProjectId, want.Version)
	}
	got, err := syncpb.Inflate(d, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("inflated snapshot differs from the plain one:\n%v\n%v", got, want)
	}
	t.Logf("snapshot of 10 flags: %d bytes, deflated %d", proto.Size(want), len(d.Deflated))
}

// TestAckDelayGrowsWithStreams: a replica serving one edge asks for no delay before
// acknowledgements; one serving thirty asks for one (40 µs per stream: 1 ms), on the
// stream's first message and on its snapshots.
func TestAckDelayGrowsWithStreams(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	watch := func() (first, snapshots *syncpb.WatchResponse) {
		stream, err := e.client.Watch(ctx, &syncpb.WatchRequest{ProtocolVersion: syncpb.ProtocolVersion_PROTOCOL_VERSION_1, EdgeId: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if first, err = stream.Recv(); err != nil {
			t.Fatal(err)
		}
		if snapshots, err = stream.Recv(); err != nil {
			t.Fatal(err)
		}
		return first, snapshots
	}
	if first, snaps := watch(); first.AckDelayMs != 0 || snaps.AckDelayMs != 0 || len(snaps.Snapshots) == 0 {
		t.Errorf("one stream: delay %d and %d ms (%d snapshots), want 0", first.AckDelayMs, snaps.AckDelayMs, len(snaps.Snapshots))
	}
	for range 28 {
		watch()
	}
	if first, snaps := watch(); first.AckDelayMs != 1 || snaps.AckDelayMs != 1 || len(snaps.Snapshots) == 0 {
		t.Errorf("thirty streams: delay %d and %d ms (%d snapshots), want 1", first.AckDelayMs, snaps.AckDelayMs, len(snaps.Snapshots))
	}
}

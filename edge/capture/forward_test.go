package capture_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/edge/capture"
	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// ingestServer stores what it is sent over real gRPC, refusing for good any request with an
// event named "poison" (as the control plane refuses what it cannot decode), and failing the
// first unavailable calls as an unreachable database would.
type ingestServer struct {
	syncpb.UnimplementedSyncServer
	mu          sync.Mutex // guards the fields below
	stored      []string
	unavailable int
	calls       int
}

func (s *ingestServer) Ingest(_ context.Context, req *syncpb.IngestRequest) (*syncpb.IngestResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.unavailable > 0 {
		s.unavailable--
		return nil, status.Error(codes.Unavailable, "database unreachable")
	}
	var names []string
	for _, raw := range req.Batches {
		var b syncpb.EventBatch
		if err := proto.Unmarshal(raw, &b); err != nil {
			return nil, status.Error(codes.InvalidArgument, "undecodable")
		}
		for _, e := range b.Events {
			if e.Event == "poison" {
				return nil, status.Error(codes.InvalidArgument, "cannot store this")
			}
			names = append(names, e.Event)
		}
	}
	s.stored = append(s.stored, names...)
	return &syncpb.IngestResponse{Stored: int64(len(names))}, nil
}

// instantClock fires every wait at once and counts them.
type instantClock struct{ waits int }

func (c *instantClock) After(time.Duration) <-chan time.Time {
	c.waits++
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

func startIngest(t *testing.T, srv *ingestServer) syncpb.SyncClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	syncpb.RegisterSyncServer(g, srv)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return syncpb.NewSyncClient(conn)
}

// forward spools one record per name, runs a forwarder until the spool is drained, and
// returns the dead-letter file's path.
func forward(t *testing.T, dest capture.Destination, clock *instantClock, names ...string) string {
	t.Helper()
	return forwardWith(t, dest, clock, nil, names...)
}

// forwardWith is forward with the forwarder shaped by setup (when not nil) before it runs.
func forwardWith(t *testing.T, dest capture.Destination, clock *instantClock, setup func(*capture.Forwarder), names ...string) string {
	t.Helper()
	dir := t.TempDir()
	sp, err := spool.Open(spool.Options{Dir: filepath.Join(dir, "spool")})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	for _, n := range names {
		rec := recordOf(n)
		if err := sp.Append(rec); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "dead-letters.jsonl")
	dl, err := capture.OpenDeadLetters(path, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	f := capture.NewForwarder(sp, dest, dl, "edge-1", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	f.Clock = clock
	if setup != nil {
		setup(f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for sp.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("spool not drained: %d bytes pending", sp.Pending())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	return path
}

// recordOf is the spool record of one event named name, or, for "big:<n>", of n events
// of about 1 KiB each, or for "huge", of one event of 100 KiB.
func recordOf(name string) []byte {
	b := &syncpb.EventBatch{ProjectId: 1}
	var count int
	switch {
	case name == "huge":
		b.Events = append(b.Events, &syncpb.CapturedEvent{Event: name, DistinctId: "d", Properties: []byte(`{"pad":"` + strings.Repeat("h", 100<<10) + `"}`)})
	case strings.HasPrefix(name, "big:"):
		count, _ = strconv.Atoi(strings.TrimPrefix(name, "big:"))
		for i := range count {
			b.Events = append(b.Events, &syncpb.CapturedEvent{Event: fmt.Sprintf("big-%d", i), DistinctId: "d", Properties: []byte(`{"pad":"` + strings.Repeat("p", 1000) + `"}`)})
		}
	default:
		b.Events = append(b.Events, &syncpb.CapturedEvent{Event: name, DistinctId: "d"})
	}
	rec, _ := proto.Marshal(b)
	return rec
}

func deadLetterNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20) // a line holds a whole record
	for sc.Scan() {
		var line struct {
			Error  string `json:"error"`
			Record []byte `json:"record"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		var b syncpb.EventBatch
		if err := proto.Unmarshal(line.Record, &b); err != nil || line.Error == "" {
			t.Fatalf("dead letter %s: %v", sc.Bytes(), err)
		}
		names = append(names, b.Events[0].Event)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestPermanentRefusalIsDeadLetteredAndTheQueueMovesOn: a record the control plane refuses for
// good no longer blocks the records after it.
func TestPermanentRefusalIsDeadLetteredAndTheQueueMovesOn(t *testing.T) {
	srv := &ingestServer{}
	path := forward(t, capture.NewIngestDestination(startIngest(t, srv), "edge-1"), &instantClock{}, "a", "b", "poison", "c", "d")
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.stored) != 4 {
		t.Errorf("stored %v, want a b c d", srv.stored)
	}
	if got := deadLetterNames(t, path); len(got) != 1 || got[0] != "poison" {
		t.Errorf("dead letters %v, want [poison]", got)
	}
}

// TestTransientFailuresAreRetried: an unreachable database delays delivery but loses nothing
// and dead-letters nothing.
func TestTransientFailuresAreRetried(t *testing.T) {
	srv := &ingestServer{unavailable: 3}
	clock := &instantClock{}
	path := forward(t, capture.NewIngestDestination(startIngest(t, srv), "edge-1"), clock, "a", "b")
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.stored) != 2 || clock.waits != 3 {
		t.Errorf("stored %v after %d waits, want a b after 3", srv.stored, clock.waits)
	}
	if got := deadLetterNames(t, path); len(got) != 0 {
		t.Errorf("dead letters %v, want none", got)
	}
}

// asyncDest is an AsyncDestination that takes each batch when its wait is called, except
// that the first wait of a batch holding failOnce fails as a lost acknowledgement would; it
// records how many batches were sent and not yet settled at most.
type asyncDest struct {
	mu       sync.Mutex // guards the fields below
	failOnce string
	taken    []string
	sent     []string // batches' first names, in the order sent
	inFlight int
	most     int
}

func (d *asyncDest) Deliver(ctx context.Context, records [][]byte) error {
	return d.Send(ctx, records)(ctx)
}

func (d *asyncDest) Send(_ context.Context, records [][]byte) func(context.Context) error {
	var names []string
	for _, r := range records {
		var b syncpb.EventBatch
		if err := proto.Unmarshal(r, &b); err != nil {
			panic(err)
		}
		names = append(names, b.Events[0].Event)
	}
	d.mu.Lock()
	d.sent = append(d.sent, names[0])
	d.inFlight++
	d.most = max(d.most, d.inFlight)
	d.mu.Unlock()
	return func(context.Context) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.inFlight--
		for _, n := range names {
			if n == d.failOnce {
				d.failOnce = ""
				return status.Error(codes.Unavailable, "acknowledgement lost")
			}
		}
		d.taken = append(d.taken, names...)
		return nil
	}
}

// TestPipelinedForwardingRetriesInOrder: with an asynchronous destination the forwarder keeps
// several batches in flight, and a batch whose acknowledgement failed is delivered again
// before the spool moves past it: every record arrives, the failed one after its retry.
func TestPipelinedForwardingRetriesInOrder(t *testing.T) {
	dest := &asyncDest{failOnce: "c"}
	clock := &instantClock{}
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	forwardWith(t, dest, clock, func(f *capture.Forwarder) { f.MaxBatchBytes = 1 }, names...) // a record a batch
	dest.mu.Lock()
	defer dest.mu.Unlock()
	if len(dest.taken) != len(names) || clock.waits != 1 {
		t.Fatalf("taken %v after %d waits, want each of %v once after 1", dest.taken, clock.waits, names)
	}
	for i, n := range dest.taken {
		if n != names[i] {
			t.Errorf("taken %v, want %v: the failed batch was not settled before the later ones", dest.taken, names)
			break
		}
	}
	if dest.most < 2 {
		t.Errorf("at most %d batch in flight: not pipelined", dest.most)
	}
}

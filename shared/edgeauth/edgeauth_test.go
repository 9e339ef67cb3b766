package edgeauth

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// serverStream is the part of a gRPC server stream Serve uses: its context.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s serverStream) Context() context.Context { return s.ctx }

// TestStreamsCutRevokedEdges: Cut ends at once every open stream of an edge that left the
// live set, with Unauthenticated, and leaves the others open; the count of an edge's open
// streams is told in order.
func TestStreamsCutRevokedEdges(t *testing.T) {
	s := NewStreams(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var mu sync.Mutex
	counts := map[string][]int{}
	open := func(id string) chan error {
		done := make(chan error, 1)
		ss := serverStream{ctx: context.Background()}
		counted := func(n int) {
			mu.Lock()
			counts[id] = append(counts[id], n)
			mu.Unlock()
		}
		go func() {
			done <- s.Serve(ss.ctx, ss, id, id+"-name", counted, func(ss grpc.ServerStream) error {
				<-ss.Context().Done()
				return nil
			})
		}()
		return done
	}
	revokedA, revokedB, kept := open("revoked"), open("revoked"), open("kept")
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		n := len(s.open["revoked"]) + len(s.open["kept"])
		s.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the streams did not open")
		}
		time.Sleep(time.Millisecond)
	}
	s.Cut(func(id string) bool { return id == "kept" })
	for _, done := range []chan error{revokedA, revokedB} {
		select {
		case err := <-done:
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("a revoked edge's stream ended with %v, want Unauthenticated", err)
			}
		case <-time.After(10 * time.Second): // "at once" is the sync service's 1 s promise, tested there; here it must end at all
			t.Fatal("a revoked edge's stream is still open")
		}
	}
	select {
	case err := <-kept:
		t.Fatalf("a live edge's stream ended: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	mu.Lock()
	if !slices.Equal(counts["revoked"], []int{1, 2, 1, 0}) || !slices.Equal(counts["kept"], []int{1}) {
		t.Errorf("open streams told %v: want the revoked edge's 1, 2, 1, 0 and the kept one's 1", counts)
	}
	mu.Unlock()
	s.Cut(func(string) bool { return false })
	<-kept
}

// TestToken reads the bearer token of a call.
func TestToken(t *testing.T) {
	for _, tc := range []struct {
		md   metadata.MD
		want string
	}{
		{metadata.Pairs("authorization", "Bearer fle_abc "), "fle_abc"},
		{metadata.Pairs("authorization", "Basic x"), ""},
		{metadata.MD{}, ""},
	} {
		if got := Token(metadata.NewIncomingContext(context.Background(), tc.md)); got != tc.want {
			t.Errorf("%v: token %q, want %q", tc.md, got, tc.want)
		}
	}
}

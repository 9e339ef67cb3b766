package cpclient

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/flagedge/flagedge/internal/daemon"
	"github.com/flagedge/flagedge/internal/tlstest"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// replica is a sync service on 127.0.0.1 that answers look-ups with its name and records
// the authorization each call carried.
type replica struct {
	syncpb.UnimplementedSyncServer
	name  string
	srv   *grpc.Server
	addr  string
	auths atomic.Value // string
}

func (r *replica) LookupPerson(ctx context.Context, _ *syncpb.LookupPersonRequest) (*syncpb.LookupPersonResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.auths.Store(strings.Join(md.Get("authorization"), ","))
	return &syncpb.LookupPersonResponse{Properties: []byte(`"` + r.name + `"`)}, nil
}

func startReplica(t *testing.T, name string, opts ...grpc.ServerOption) *replica {
	t.Helper()
	return startReplicaAt(t, name, "127.0.0.1:0", opts...)
}

// startReplicaAt is startReplica on the address addr (one a stopped replica had).
func startReplicaAt(t *testing.T, name, addr string, opts ...grpc.ServerOption) *replica {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, srv: grpc.NewServer(opts...), addr: ln.Addr().String()}
	syncpb.RegisterSyncServer(r.srv, r)
	go r.srv.Serve(ln)
	t.Cleanup(r.srv.Stop)
	return r
}

// who asks the control plane and returns which replica answered.
func who(t *testing.T, client syncpb.SyncClient) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := client.LookupPerson(ctx, &syncpb.LookupPersonRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return "", err
	}
	return strings.Trim(string(resp.Properties), `"`), nil
}

// TestFailsOverBetweenReplicas: with two replicas listed, calls go to one (either: the list is
// shuffled); when it dies, they go to the other within a couple of seconds, carrying the edge
// token.
func TestFailsOverBetweenReplicas(t *testing.T) {
	a, b := startReplica(t, "a"), startReplica(t, "b")
	conn, err := Dial(Config{Addrs: a.addr + ", " + b.addr, Token: "fle_secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := syncpb.NewSyncClient(conn)
	first, err := who(t, client)
	if err != nil {
		t.Fatal(err)
	}
	used, other := a, b
	if first == "b" {
		used, other = b, a
	}
	if got := used.auths.Load(); got != "Bearer fle_secret" {
		t.Errorf("authorization %q, want the edge token", got)
	}
	used.srv.Stop()
	stopped := time.Now()
	for {
		if got, err := who(t, client); err == nil && got == other.name {
			break
		}
		if time.Since(stopped) > 5*time.Second {
			t.Fatal("no fail-over to the second replica within 5s")
		}
	}
	if d := time.Since(stopped); d > 2*time.Second {
		t.Errorf("fail-over took %v, want under 2s", d)
	}
}

// TestFallbackOnlyWhileNoneAnswers: upstreams given as fallbacks (the control plane behind a
// tier of relays) take no edge while one of the addresses answers, whatever the shuffle; they
// take the edges when every address is down, and give them back when they fail in turn.
func TestFallbackOnlyWhileNoneAnswers(t *testing.T) {
	a, b, cp := startReplica(t, "a"), startReplica(t, "b"), startReplica(t, "cp")
	cfg := Config{Addrs: a.addr + "," + b.addr, Fallback: cp.addr, Token: "fle_secret"}
	if got := cfg.Addresses(); len(got) != 3 || got[2] != cp.addr {
		t.Fatalf("addresses %v, want the fallback last", got)
	}
	seen := map[string]int{}
	for range 20 {
		conn, err := Dial(cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := who(t, syncpb.NewSyncClient(conn))
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		seen[got]++
	}
	if seen["cp"] > 0 || seen["a"] == 0 || seen["b"] == 0 {
		t.Fatalf("20 edges went to %v: want both relays and never the fallback", seen)
	}
	conn, err := Dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := syncpb.NewSyncClient(conn)
	answered := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if got, err := who(t, client); err == nil && got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not answer within 5s", want)
			}
		}
	}
	first, err := who(t, client)
	if err != nil {
		t.Fatal(err)
	}
	used, other := a, b
	if first == "b" {
		used, other = b, a
	}
	used.srv.Stop()
	answered(other.name) // the next address, not the fallback
	other.srv.Stop()
	answered("cp")
	startReplicaAt(t, "a-again", a.addr)
	cp.srv.Stop()
	answered("a-again")
}

// TestTLS: with the control plane's CA the edge talks TLS; without it, to a TLS server on a
// loopback address it talks plaintext and fails; a wrong CA fails.
func TestTLS(t *testing.T) {
	files := tlstest.MustWrite(t)
	serverTLS, err := daemon.LoadTLS(files.Cert, files.Key, "grpc-tls")
	if err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, "tls", grpc.Creds(credentials.NewTLS(serverTLS)))
	other := tlstest.MustWrite(t)
	for _, c := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"the control plane's CA", Config{Addrs: r.addr, CAFile: files.CA}, true},
		{"plaintext (loopback, no CA)", Config{Addrs: r.addr}, false},
		{"another CA", Config{Addrs: r.addr, CAFile: other.CA}, false},
	} {
		conn, err := Dial(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = syncpb.NewSyncClient(conn).LookupPerson(ctx, &syncpb.LookupPersonRequest{})
		cancel()
		conn.Close()
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want success %v", c.name, err, c.ok)
		}
	}
}

func TestPlaintextOnlyOnLoopback(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		plain bool
	}{
		{Config{Addrs: "127.0.0.1:9000"}, true},
		{Config{Addrs: "127.0.0.1:9000,[::1]:9000"}, true},
		{Config{Addrs: "127.0.0.1:9000,cp.example.com:9000"}, false},
		{Config{Addrs: "cp.example.com:9000"}, false},
		{Config{Addrs: "cp.example.com:9000", Insecure: true}, true},
		{Config{Addrs: "127.0.0.1:9000", CAFile: "ca.pem"}, false},
	} {
		if got := c.cfg.plaintext(); got != c.plain {
			t.Errorf("%+v: plaintext %v, want %v", c.cfg, got, c.plain)
		}
	}
	if err := (Config{Addrs: "nohost"}).Validate(); err == nil {
		t.Error("an address without a port was accepted")
	}
}

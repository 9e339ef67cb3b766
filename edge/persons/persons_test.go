package persons

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flagedge/flagedge/shared/flags"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// controlPlane answers look-ups over real gRPC from what the test stored in it, counting calls
// and waiting delay before each answer.
type controlPlane struct {
	syncpb.UnimplementedSyncServer
	mu      sync.Mutex // guards persons, groups and delay
	persons map[string]map[string]any
	groups  map[string]map[string]any // "<type index>/<key>"
	delay   time.Duration

	personCalls, groupCalls, overrideCalls atomic.Int64
}

func (c *controlPlane) wait(ctx context.Context) error {
	c.mu.Lock()
	d := c.delay
	c.mu.Unlock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (c *controlPlane) LookupPerson(ctx context.Context, in *syncpb.LookupPersonRequest) (*syncpb.LookupPersonResponse, error) {
	c.personCalls.Add(1)
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	props, ok := c.persons[in.DistinctId]
	c.mu.Unlock()
	if !ok {
		return &syncpb.LookupPersonResponse{}, nil
	}
	raw, _ := json.Marshal(props)
	return &syncpb.LookupPersonResponse{Found: true, Properties: raw, StaticCohortIds: []int64{3}}, nil
}

func (c *controlPlane) LookupGroups(ctx context.Context, in *syncpb.LookupGroupsRequest) (*syncpb.LookupGroupsResponse, error) {
	c.groupCalls.Add(1)
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := &syncpb.LookupGroupsResponse{}
	for _, g := range in.Groups {
		if props, ok := c.groups[groupName(int(g.GroupTypeIndex), g.GroupKey)]; ok {
			raw, _ := json.Marshal(props)
			out.Groups = append(out.Groups, &syncpb.GroupProperties{GroupTypeIndex: g.GroupTypeIndex, GroupKey: g.GroupKey, Properties: raw})
		}
	}
	return out, nil
}

func (c *controlPlane) SetHashKeyOverrides(ctx context.Context, in *syncpb.SetHashKeyOverridesRequest) (*syncpb.SetHashKeyOverridesResponse, error) {
	c.overrideCalls.Add(1)
	out := map[string]string{}
	for _, k := range in.FlagKeys {
		out[k] = in.HashKey
	}
	return &syncpb.SetHashKeyOverridesResponse{HashKeyOverrides: out}, nil
}

func groupName(typeIndex int, key string) string { return string(rune('0'+typeIndex)) + "/" + key }

func (c *controlPlane) setDelay(d time.Duration) {
	c.mu.Lock()
	c.delay = d
	c.mu.Unlock()
}

// newStore starts a control plane on 127.0.0.1 and returns a store that looks up there.
func newStore(t *testing.T, cfg Config) (*Store, *controlPlane) {
	t.Helper()
	cp := &controlPlane{
		persons: map[string]map[string]any{"known": {"plan": "pro", "email": "a@example.com"}},
		groups:  map[string]map[string]any{groupName(0, "acme"): {"size": 10.0}},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	syncpb.RegisterSyncServer(srv, cp)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s, err := NewStore(syncpb.NewSyncClient(conn), cfg, nil, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, cp
}

// settle applies pending cache writes, so that what the store just cached is visible.
func (s *Store) settle() { s.Wait() }

var testConfig = Config{Timeout: time.Second, TTL: time.Minute, NegativeTTL: time.Minute, PersonMaxBytes: 1 << 20, GroupMaxBytes: 1 << 20, OverlayMaxBytes: 1 << 20}

func TestPersonMissThenHit(t *testing.T) {
	s, cp := newStore(t, testConfig)
	ctx := context.Background()
	for i := range 3 {
		p, err := s.Person(ctx, 1, 1, false, "known")
		if err != nil {
			t.Fatal(err)
		}
		if !p.Found || cmp.Diff(flags.Properties{"plan": "pro", "email": "a@example.com"}, p.Properties) != "" || cmp.Diff([]int64{3}, p.StaticCohorts) != "" {
			t.Fatalf("look-up %d: %+v", i, p)
		}
		s.settle()
	}
	if n := cp.personCalls.Load(); n != 1 {
		t.Errorf("%d calls to the control plane for three look-ups of one person, want 1", n)
	}
	// Another project's person of the same distinct id is another entry.
	if _, err := s.Person(ctx, 2, 1, false, "known"); err != nil {
		t.Fatal(err)
	}
	if n := cp.personCalls.Load(); n != 2 {
		t.Errorf("%d calls after a look-up in another project, want 2", n)
	}
}

func TestNegativeEntriesExpireSooner(t *testing.T) {
	cfg := testConfig
	cfg.NegativeTTL = time.Second // the second look-up below must come within it, however loaded the machine
	s, cp := newStore(t, cfg)
	ctx := context.Background()
	for range 2 {
		p, err := s.Person(ctx, 1, 1, false, "new-user")
		if err != nil || p.Found {
			t.Fatalf("unknown person: %+v, %v", p, err)
		}
		s.settle()
	}
	if n := cp.personCalls.Load(); n != 1 {
		t.Fatalf("%d calls for an unknown person asked twice at once, want 1 (negative entry)", n)
	}
	// The person is created at the control plane; once the negative entry expires, it is seen.
	cp.mu.Lock()
	cp.persons["new-user"] = map[string]any{"plan": "free"}
	cp.mu.Unlock()
	time.Sleep(cfg.NegativeTTL + 50*time.Millisecond)
	p, err := s.Person(ctx, 1, 1, false, "new-user")
	if err != nil || !p.Found || p.Properties["plan"] != "free" {
		t.Fatalf("after the negative TTL: %+v, %v", p, err)
	}
	if n := cp.personCalls.Load(); n != 2 {
		t.Errorf("%d calls, want 2", n)
	}
}

func TestFoundEntriesExpireAfterTTL(t *testing.T) {
	cfg := testConfig
	cfg.TTL = time.Second // the cached answer below must be asked for within it, however loaded the machine
	s, cp := newStore(t, cfg)
	ctx := context.Background()
	if _, err := s.Person(ctx, 1, 1, false, "known"); err != nil {
		t.Fatal(err)
	}
	s.settle()
	cp.mu.Lock()
	cp.persons["known"] = map[string]any{"plan": "enterprise"}
	cp.mu.Unlock()
	if p, _ := s.Person(ctx, 1, 1, false, "known"); p.Properties["plan"] != "pro" {
		t.Fatalf("within the TTL the cached person is answered: %+v", p)
	}
	time.Sleep(cfg.TTL + 50*time.Millisecond)
	if p, _ := s.Person(ctx, 1, 1, false, "known"); p.Properties["plan"] != "enterprise" {
		t.Fatalf("after the TTL the person is fetched again: %+v", p)
	}
}

func TestStaticCohortMembershipRefetchedOnNewSnapshot(t *testing.T) {
	s, cp := newStore(t, testConfig)
	ctx := context.Background()
	if _, err := s.Person(ctx, 1, 5, true, "known"); err != nil {
		t.Fatal(err)
	}
	s.settle()
	if _, err := s.Person(ctx, 1, 5, true, "known"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Person(ctx, 1, 6, false, "known"); err != nil {
		t.Fatal(err)
	}
	if n := cp.personCalls.Load(); n != 1 {
		t.Fatalf("%d calls: same version, or memberships not needed, must be answered from cache", n)
	}
	if _, err := s.Person(ctx, 1, 6, true, "known"); err != nil {
		t.Fatal(err)
	}
	if n := cp.personCalls.Load(); n != 2 {
		t.Errorf("%d calls: a newer snapshot with static cohorts must refetch memberships", n)
	}
}

func TestConcurrentMissesShareOneCall(t *testing.T) {
	s, cp := newStore(t, testConfig)
	cp.setDelay(100 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := s.Person(context.Background(), 1, 1, false, "known")
			if err == nil && !p.Found {
				t.Error("not found")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := cp.personCalls.Load(); n != 1 {
		t.Errorf("%d calls for 20 concurrent misses of one person, want 1", n)
	}
}

func TestLookupTimeout(t *testing.T) {
	cfg := testConfig
	cfg.Timeout = 50 * time.Millisecond
	s, cp := newStore(t, cfg)
	cp.setDelay(2 * time.Second)
	start := time.Now()
	if _, err := s.Person(context.Background(), 1, 1, false, "known"); err == nil {
		t.Fatal("a look-up slower than the timeout succeeded")
	}
	if _, err := s.Groups(context.Background(), 1, []GroupRef{{TypeIndex: 0, Name: "company", Key: "acme"}}); err == nil {
		t.Fatal("a group look-up slower than the timeout succeeded")
	}
	// A look-up that waited for the control plane would take its whole 2 s delay.
	if d := time.Since(start); d >= 2*time.Second {
		t.Errorf("two timed-out look-ups took %v, want about 100ms", d)
	}
	// A failure is not cached: once the control plane answers again, so does the store.
	cp.setDelay(0)
	if p, err := s.Person(context.Background(), 1, 1, false, "known"); err != nil || !p.Found {
		t.Fatalf("after recovery: %+v, %v", p, err)
	}
}

func TestOverlayAppliesCapturedChanges(t *testing.T) {
	s, _ := newStore(t, testConfig)
	ctx := context.Background()
	// Captured before any look-up: applied over the control plane's answer.
	s.ApplyPersonUpdate(1, "known", flags.Properties{"plan": "enterprise"}, flags.Properties{"first_seen": "x", "email": "ignored"}, nil)
	p, err := s.Person(ctx, 1, 1, false, "known")
	if err != nil {
		t.Fatal(err)
	}
	want := flags.Properties{"plan": "enterprise", "email": "a@example.com", "first_seen": "x"}
	if diff := cmp.Diff(want, p.Properties); diff != "" {
		t.Fatalf("overlay over a look-up (-want +got):\n%s", diff)
	}
	s.settle()
	// Captured after: the cached person changes at once; $unset removes.
	s.ApplyPersonUpdate(1, "known", nil, nil, []string{"email"})
	p, _ = s.Person(ctx, 1, 1, false, "known")
	if diff := cmp.Diff(flags.Properties{"plan": "enterprise", "first_seen": "x"}, p.Properties); diff != "" {
		t.Fatalf("overlay over the cached person (-want +got):\n%s", diff)
	}
	// A person the control plane does not know yet exists once captured.
	s.ApplyPersonUpdate(1, "brand-new", flags.Properties{"plan": "free"}, nil, nil)
	p, _ = s.Person(ctx, 1, 1, false, "brand-new")
	if !p.Found || p.Properties["plan"] != "free" {
		t.Fatalf("captured new person: %+v", p)
	}
}

func TestGroupsCachedAndNegative(t *testing.T) {
	s, cp := newStore(t, testConfig)
	ctx := context.Background()
	refs := []GroupRef{{TypeIndex: 0, Name: "company", Key: "acme"}, {TypeIndex: 0, Name: "company", Key: "nobody"}}
	for range 2 {
		got, err := s.Groups(ctx, 1, refs)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[string]flags.Properties{"company": {"size": 10.0}}, got); diff != "" {
			t.Fatalf("groups (-want +got):\n%s", diff)
		}
		s.settle()
	}
	if n := cp.groupCalls.Load(); n != 1 {
		t.Errorf("%d calls for a found and a missing group asked twice, want 1", n)
	}
}

func TestHashKeyOverridesUpdateTheCachedPerson(t *testing.T) {
	s, cp := newStore(t, testConfig)
	ctx := context.Background()
	if _, err := s.Person(ctx, 1, 1, false, "known"); err != nil {
		t.Fatal(err)
	}
	s.settle()
	got, err := s.SetHashKeyOverrides(ctx, 1, "known", "anon-1", []string{"exp"})
	if err != nil || got["exp"] != "anon-1" {
		t.Fatalf("overrides %v, %v", got, err)
	}
	s.settle()
	p, _ := s.Person(ctx, 1, 1, false, "known")
	if p.HashKeyOverrides["exp"] != "anon-1" || cp.personCalls.Load() != 1 {
		t.Errorf("cached person after overrides: %+v (%d look-ups)", p, cp.personCalls.Load())
	}
}

// TestSizeCountsWhatIsHeld: the caches' cost of a person grows with what it holds, so that a
// budget in bytes bounds memory whatever the users' properties.
func TestSizeCountsWhatIsHeld(t *testing.T) {
	small := &Person{distinctID: "u1", Found: true, Properties: flags.Properties{"plan": "pro"}}
	big := &Person{distinctID: "u1", Found: true, Properties: flags.Properties{}}
	for i := range 10 {
		big.Properties[strconv.Itoa(i)] = strings.Repeat("x", 100)
	}
	big.Properties["nested"] = map[string]any{"list": []any{1.0, "two", true}}
	if s, b := small.size(), big.size(); s <= 0 || b < s+1000 || b > 4000 {
		t.Errorf("sizes: small %d, big %d (holds over 1,000 bytes of strings)", s, b)
	}
}

package bloomhub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/bloomhub"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/postgres/postgrestest"
	"github.com/flagedge/flagedge/shared/bloomkeys"
)

// mirror applies a subscription's changes as an edge does.
type mirror struct {
	mu      sync.Mutex
	filters map[int64]*bloom.BloomFilter
}

func follow(ctx context.Context, hub *bloomhub.Hub) *mirror {
	m := &mirror{filters: map[int64]*bloom.BloomFilter{}}
	sub := hub.Subscribe(nil)
	go func() {
		defer hub.Unsubscribe(sub)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub.Wake():
			}
			c := sub.Take()
			m.mu.Lock()
			if c.Reset {
				clear(m.filters)
			}
			for id, f := range c.Filters {
				b := &bloom.BloomFilter{}
				if err := b.UnmarshalBinary(f.Raw); err != nil {
					panic(err)
				}
				m.filters[id] = b
			}
			for _, a := range c.Additions {
				if f := m.filters[a.ProjectID]; f != nil {
					for _, k := range a.Keys {
						f.Add(k)
					}
				}
			}
			m.mu.Unlock()
		}
	}()
	return m
}

// missing returns the keys the mirror's filter of the project lacks; all of them when it
// has no filter.
func (m *mirror) missing(projectID int64, keys [][]byte) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.filters[projectID]
	if f == nil {
		return len(keys)
	}
	n := 0
	for _, k := range keys {
		if !f.Test(k) {
			n++
		}
	}
	return n
}

// storedKeys reads every key the database holds for the project.
func storedKeys(t *testing.T, db *postgres.DB, projectID int64) [][]byte {
	t.Helper()
	var keys [][]byte
	err := postgres.NewMemberStore(db).ScanMembers(context.Background(), projectID, func(int64, int) {}, func(_ int64, k []byte) {
		keys = append(keys, append([]byte(nil), k...))
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

type rig struct {
	t         *testing.T
	db        *postgres.DB
	url       string
	projectID int64
	hub       *bloomhub.Hub
	events    *postgres.EventStore
	resyncs   atomic.Int64
}

func newRig(t *testing.T) *rig {
	t.Helper()
	db, boot, url := postgrestest.Open(t)
	log := slog.New(slog.DiscardHandler)
	r := &rig{t: t, db: db, url: url, projectID: boot.ProjectID, events: postgres.NewEventStore(db, log)}
	r.hub = bloomhub.NewHub(postgres.NewMemberStore(db), log, prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		postgres.Listen(ctx, url, postgres.MembershipChannel, log, func(ctx context.Context, payload string) error {
			id, keys, rebuild, err := postgres.ParseMembershipNotice(payload)
			if err != nil {
				return err
			}
			return r.hub.Announce(ctx, id, keys, rebuild)
		}, func(ctx context.Context) error {
			// Counted once built: a test that waits for a build then finds the hub ready (a
			// count taken before it, Ensure raced the build and the new project had no filter).
			err := r.hub.Resync(ctx)
			if err == nil {
				r.resyncs.Add(1)
			}
			return err
		}, r.hub.Lost)
	}()
	return r
}

func (r *rig) ingest(events ...controlplane.Event) {
	r.t.Helper()
	if _, err := r.events.Ingest(context.Background(), []controlplane.EventBatch{{ProjectID: r.projectID, Events: events}}); err != nil {
		r.t.Error(err)
	}
}

func (r *rig) event(name, distinctID string, props map[string]any) controlplane.Event {
	raw, _ := json.Marshal(props)
	now := time.Now()
	return controlplane.Event{UUID: uuid.NewString(), ProjectID: r.projectID, Name: name, DistinctID: distinctID, Properties: raw, Timestamp: now, ReceivedAt: now}
}

// settle waits until a key stored now has reached m: every key stored before it has too.
func (r *rig) settle(m *mirror, label string) {
	r.t.Helper()
	sentinel := "sentinel-" + label
	r.ingest(r.event("$pageview", sentinel, nil))
	key := [][]byte{bloomkeys.PersonKey(nil, sentinel)}
	deadline := time.Now().Add(20 * time.Second)
	for m.missing(r.projectID, key) > 0 {
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: the sentinel never reached the filter", label)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFiltersMissNoStoredKey stores persons (new, identified, aliased) and groups from
// several writers while the announcements' connection is killed again and again (each time
// every filter is rebuilt) and streams subscribe at random moments; afterwards every key the
// database holds must be in every stream's filter. The order it depends on — LISTEN, then
// build, then announcements — is what it tests: building before the LISTEN is in place, or
// dropping announcements during a build, loses keys committed in between.
func TestFiltersMissNoStoredKey(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mirrors := []*mirror{follow(ctx, r.hub)}
	waitFor(t, "first build", func() bool { return r.resyncs.Load() > 0 })

	admin, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				batch := []controlplane.Event{r.event("$pageview", id, nil)}
				switch i % 4 {
				case 1: // identify: the new distinct id joins the anonymous one's person
					batch = append(batch, r.event("$identify", "user-"+id, map[string]any{"$anon_distinct_id": id, "$set": map[string]any{"plan": "pro"}}))
				case 2:
					batch = append(batch, r.event("$create_alias", id, map[string]any{"alias": "alias-" + id}))
				case 3:
					batch = append(batch, r.event("$groupidentify", id, map[string]any{"$group_type": "company", "$group_key": "org-" + id,
						"$group_set": map[string]any{"size": i}}))
				}
				r.ingest(batch...)
			}
		}()
	}
	// Each round rebuilds every filter while the writers go on, then checks that every key
	// stored before a sentinel is in every stream's filter once the sentinel is: a key
	// committed while the filters were being rebuilt must have been announced after. It
	// runs at least 12 rounds and on until 500 keys were checked, since a slow machine
	// stores fewer keys per round (at most 100 rounds).
	checked := 0
	for round := 0; round < 12 || (checked < 500 && round < 100); round++ {
		if round%3 == 0 {
			mirrors = append(mirrors, follow(ctx, r.hub))
		}
		before := r.resyncs.Load()
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "resync", func() bool { return r.resyncs.Load() > before })
		time.Sleep(30 * time.Millisecond)
		keys := storedKeys(t, r.db, r.projectID)
		for i, m := range mirrors {
			r.settle(m, fmt.Sprintf("%d-%d", round, i))
			if n := m.missing(r.projectID, keys); n > 0 {
				t.Fatalf("round %d, stream %d: %d of %d stored keys missing from its filter", round, i, n, len(keys))
			}
		}
		checked = len(keys)
	}
	close(stop)
	wg.Wait()
	keys := storedKeys(t, r.db, r.projectID)
	var groups int
	for _, k := range keys {
		if k[0] == 'g' {
			groups++
		}
	}
	t.Logf("%d keys stored (%d groups), %d rebuilds of everything, %d streams", len(keys), groups, r.resyncs.Load(), len(mirrors))
	if checked < 500 || groups == 0 {
		t.Fatalf("too little stored to tell: %d keys, %d groups", checked, groups)
	}
}

func TestFilterGrowsAndTakesLongKeys(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := follow(ctx, r.hub)
	waitFor(t, "first build", func() bool { return r.resyncs.Load() > 0 })
	for b := range 30 {
		var batch []controlplane.Event
		for i := range 100 {
			batch = append(batch, r.event("$pageview", fmt.Sprintf("grow-%d-%d", b, i), nil))
		}
		r.ingest(batch...)
	}
	long := strings.Repeat("x", 9000) // too long for a notification: announced as "rebuild"
	r.ingest(r.event("$pageview", long, nil))
	r.settle(m, "grow")
	keys := storedKeys(t, r.db, r.projectID)
	if n := m.missing(r.projectID, keys); n > 0 {
		t.Fatalf("%d of %d keys missing", n, len(keys))
	}
	m.mu.Lock()
	capBits := m.filters[r.projectID].Cap()
	m.mu.Unlock()
	if want := bloomkeys.NewFilter(len(keys) / 2).Cap(); capBits < want { // capacity ≥ the keys
		t.Fatalf("filter of %d bits for %d keys: not rebuilt larger (want ≥ %d)", capBits, len(keys), want)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestNewProjectGetsAFilter: a project created after the filters were built gets an empty
// filter as soon as its snapshot is announced, and then the keys stored for it.
func TestNewProjectGetsAFilter(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := follow(ctx, r.hub)
	waitFor(t, "first build", func() bool { return r.resyncs.Load() > 0 })
	orgID := r.orgID()
	p, err := postgres.NewProjectService(r.db).CreateProject(controlplane.NewContextWithUser(ctx, &controlplane.User{OrganizationID: orgID}), orgID, "later")
	if err != nil {
		t.Fatal(err)
	}
	r.hub.Ensure(p.ID) // as the snapshot notification of the new project does
	probe := [][]byte{bloomkeys.PersonKey(nil, "nobody")}
	waitFor(t, "an empty filter for the new project", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.filters[p.ID] != nil
	})
	if m.missing(p.ID, probe) != 1 {
		t.Fatal("the new project's filter holds a key never stored")
	}
	r.projectID = p.ID
	r.ingest(r.event("$pageview", "first-user", nil))
	waitFor(t, "the new project's first user", func() bool {
		return m.missing(p.ID, [][]byte{bloomkeys.PersonKey(nil, "first-user")}) == 0
	})
}

func (r *rig) orgID() int64 {
	r.t.Helper()
	var id int64
	if err := r.db.Pool.QueryRow(context.Background(), `SELECT organization_id FROM projects WHERE id = $1`, r.projectID).Scan(&id); err != nil {
		r.t.Fatal(err)
	}
	return id
}

// TestLostAnnouncementsDropFilters: once announcements may be missed, every stream drops its
// filters at once (its edge looks keys up) until they are rebuilt.
func TestLostAnnouncementsDropFilters(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := follow(ctx, r.hub)
	has := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.filters[r.projectID] != nil
	}
	waitFor(t, "a filter", has)
	r.hub.Lost()
	waitFor(t, "the filter dropped", func() bool { return !has() })
	r.hub.Ensure(r.projectID) // a snapshot notice meanwhile must not bring an empty filter
	time.Sleep(50 * time.Millisecond)
	if has() {
		t.Fatal("a filter was sent while announcements may be missed")
	}
	if err := r.hub.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the filter back", has)
}

// Package persons is the edge's view of stored person and group properties: look-ups at the
// control plane behind caches (one request per key at a time, a timeout, a time to live,
// shorter for "not found"), and the overlay of properties this edge captured and the control
// plane may not have stored yet.
package persons

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc"

	"github.com/flagedge/flagedge/edge/bloomset"
	"github.com/flagedge/flagedge/edge/cache"
	"github.com/flagedge/flagedge/shared/bloomkeys"
	"github.com/flagedge/flagedge/shared/flags"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// Lookup is the part of the control plane's sync API that the edge asks about persons.
type Lookup interface {
	LookupPerson(ctx context.Context, in *syncpb.LookupPersonRequest, opts ...grpc.CallOption) (*syncpb.LookupPersonResponse, error)
	LookupGroups(ctx context.Context, in *syncpb.LookupGroupsRequest, opts ...grpc.CallOption) (*syncpb.LookupGroupsResponse, error)
	SetHashKeyOverrides(ctx context.Context, in *syncpb.SetHashKeyOverridesRequest, opts ...grpc.CallOption) (*syncpb.SetHashKeyOverridesResponse, error)
}

// Person is what is stored about a person, as cached at the edge. It is immutable once
// cached: updates replace it.
type Person struct {
	projectID  int64
	distinctID string
	// version is the project's snapshot version when the person was fetched: static cohort
	// memberships change with the snapshot.
	version int64
	// epoch is the store's replaced count when a "not found" was fetched: it is not used once
	// filters were replaced whole since.
	epoch uint64
	// Revision is what this answer about the person was read from (see Revision).
	Revision         Revision
	Found            bool
	Properties       flags.Properties
	StaticCohorts    []int64
	HashKeyOverrides map[string]string
}

// Revision identifies the state of a person or group that the store answered from: the
// cached look-up (Stored; 0 when the control plane stores nothing about the key, as its
// membership filter says, so nothing was looked up) and the overlay of what this edge captured
// (Overlay; 0 when there is none). Every look-up cached and every overlay written takes a new
// number from one counter, so two answers of one key with equal revisions are equal: an answer
// computed from stored properties (edge/answercache) can be given again while the revisions
// its key holds are current.
type Revision struct {
	Stored, Overlay uint64
}

// group is a cached group's properties.
type group struct {
	projectID  int64
	typeIndex  int
	key        string
	properties flags.Properties // nil when the group does not exist
	epoch      uint64           // as Person's, for a group that does not exist
	revision   uint64           // Revision.Stored of answers from this entry
}

// Config tunes the store.
type Config struct {
	// Timeout bounds one look-up: a flag that needs stored properties is better answered
	// as failed than late. 300 ms leaves a request well under a second.
	Timeout time.Duration
	// TTL is how long a found person or group is reused; NegativeTTL, one that was not found
	// (shorter: a new user is often captured right after the first /decide).
	TTL, NegativeTTL time.Duration
	// PersonMaxBytes bounds the cache of looked-up persons, GroupMaxBytes that of groups, by
	// the estimated bytes of what they hold (sizeOf), whatever the number of users.
	PersonMaxBytes, GroupMaxBytes int64
	// OverlayMaxBytes bounds what this edge remembers of the persons it captured (their
	// overlays, and the marks of those it created, which get a quarter of it).
	OverlayMaxBytes int64
	// MembershipMaxBytes caps the memory of the membership filters (0: no cap).
	MembershipMaxBytes int64
}

// DefaultConfig returns the store's configuration unless told otherwise (a function, so that
// no caller can change another's defaults). Its budgets (88 MiB in all, of which the filters'
// 32 MiB serve about 13 million distinct ids) keep an edge that captured a million new users
// in a few minutes within 150 MB resident, with the default memory limit
// (docs/operations.md).
func DefaultConfig() Config {
	return Config{Timeout: 300 * time.Millisecond, TTL: time.Minute, NegativeTTL: 10 * time.Second,
		PersonMaxBytes: 32 << 20, GroupMaxBytes: 8 << 20, OverlayMaxBytes: 16 << 20, MembershipMaxBytes: 32 << 20}
}

// Store answers stored person and group properties from a cache, asking the control plane
// on a miss, once for concurrent requests of the same key — unless the project's membership
// filter says the control plane stores nothing about the key: then without asking.
type Store struct {
	lookup   Lookup
	members  *bloomset.Set
	cfg      Config
	persons  *cache.Cache[*Person]
	groups   *cache.Cache[*group]
	overlays *cache.Cache[*overlay]
	flight   singleflight.Group
	// overlayLocks serialise changes to one person's overlay (striped by cache key).
	overlayLocks [64]sync.Mutex
	// forgotten counts keys forgotten because the control plane announced them: a look-up that
	// found nothing is not cached when one was forgotten while it was under way, since the
	// answer may predate the key.
	forgotten atomic.Uint64
	// replaced counts whole replacements of membership filters: keys may then have become
	// stored without being announced one by one, so every cached "not found" (and every mark
	// of a person this edge created) from before is disregarded.
	replaced atomic.Uint64
	// originated marks persons this edge's captures created: their distinct ids were in no
	// filter when captured, so what the control plane stores about them is what this edge sent
	// (the overlay) until it announces them. They are answered without a look-up meanwhile.
	originated *marks
	calls      *prometheus.HistogramVec // control-plane calls by kind and result
	// revisions numbers what is cached and every overlay (Revision).
	revisions atomic.Uint64
}

// overlay is what this edge captured about a person's properties and the control plane may
// not have stored yet: it is applied over look-ups for a while.
type overlay struct {
	projectID  int64
	distinctID string
	revision   uint64 // Revision.Overlay of answers it is applied to
	set        flags.Properties
	setOnce    flags.Properties
	unset      []string
}

// overlayTTL covers the time from capture to storage at the control plane, including a
// forwarder retrying through a short outage.
const overlayTTL = 2 * time.Minute

// NewStore returns a store over lookup. reg may be nil.
func NewStore(lookup Lookup, cfg Config, m *cache.Metrics, log *slog.Logger, reg prometheus.Registerer) (*Store, error) {
	persons, err := cache.NewBytes("persons", cfg.PersonMaxBytes, typicalEntryBytes, cfg.TTL, (*Person).size, m)
	if err != nil {
		return nil, err
	}
	groups, err := cache.NewBytes("groups", cfg.GroupMaxBytes, typicalEntryBytes, cfg.TTL, (*group).size, m)
	if err != nil {
		return nil, err
	}
	overlays, err := cache.NewBytes("person_overlays", cfg.OverlayMaxBytes*3/4, typicalEntryBytes, overlayTTL, (*overlay).size, m)
	if err != nil {
		return nil, err
	}
	// Two generations of marks share a quarter of the overlays' budget (50,000 marks each
	// with the default).
	originated := newMarks(overlayTTL, int(max(cfg.OverlayMaxBytes/4/2/markBytes, 1)))
	calls := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flagedge_edge_lookup_duration_seconds",
		Help:    "Look-ups of stored properties at the control plane, by kind (person, groups, hash_key_overrides) and result (ok, error).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}, []string{"kind", "result"})
	if reg != nil {
		reg.MustRegister(calls)
	}
	s := &Store{lookup: lookup, cfg: cfg, persons: persons, groups: groups, overlays: overlays, originated: originated, calls: calls}
	s.members = bloomset.NewSet(cfg.MembershipMaxBytes, bloomset.Hooks{Announced: s.forget, Replaced: func() { s.replaced.Add(1) }}, log, reg)
	return s, nil
}

// Membership returns the membership filters the store consults; the snapshot stream fills
// them.
func (s *Store) Membership() *bloomset.Set { return s.members }

// Captured records that this edge accepted events that make the control plane store keys
// (shared/bloomkeys's encoding): from now on the project's filter holds them.
//
// A person whose distinct id no filter held is marked as created by this edge: until the
// control plane announces it, /decide answers it from the overlay, without a look-up.
func (s *Store) Captured(projectID int64, keys [][]byte) {
	epoch, forgotten := s.replaced.Load(), s.forgotten.Load()
	var marked []uint64
	for _, k := range s.members.Add(projectID, keys...) {
		if key, err := bloomkeys.ParseKey(k); err == nil && !key.Group {
			c := cache.Key(projectID, key.DistinctID)
			s.originated.set(c, epoch)
			marked = append(marked, c)
		}
	}
	if len(marked) == 0 {
		return
	}
	if s.forgotten.Load() != forgotten {
		// An announcement came meanwhile, maybe of one of these (the forwarder may have sent
		// them already): its forget may have run before the mark was set, so the marks go.
		for _, c := range marked {
			s.originated.remove(c)
		}
	}
}

// createdHere reports whether this edge created the person and the control plane has not
// announced it since.
func (s *Store) createdHere(projectID int64, distinctID string) bool {
	return s.originated.has(cache.Key(projectID, distinctID), s.replaced.Load())
}

// forget drops what is cached about a key the control plane has just stored.
func (s *Store) forget(projectID int64, k bloomkeys.Key) {
	if k.Group {
		s.forgetGroup(projectID, k.TypeIndex, k.GroupKey)
	} else {
		s.forgetPerson(projectID, k.DistinctID)
	}
}

// observe records one control-plane call that started at start.
func (s *Store) observe(kind string, start time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	s.calls.WithLabelValues(kind, result).Observe(time.Since(start).Seconds())
}

// Wait applies pending cache writes, so that what the store just cached is seen by the next
// read (for tests of what is built on the store).
func (s *Store) Wait() {
	s.persons.Wait()
	s.groups.Wait()
	s.overlays.Wait()
}

// Close releases the caches.
func (s *Store) Close() {
	s.persons.Close()
	s.groups.Close()
	s.overlays.Close()
}

// Person returns the stored person behind distinctID (Found false when there is none).
// version is the project's current snapshot version; when memberships matters (the project's
// flags use static cohorts), a person fetched under an older version is fetched again, since
// cohort membership changes come with a new snapshot.
func (s *Store) Person(ctx context.Context, projectID, version int64, memberships bool, distinctID string) (*Person, error) {
	key := cache.Key(projectID, distinctID)
	p, checked, ok := s.cachedPerson(key, projectID, version, memberships, distinctID)
	// Counted here, not in cachedPerson: PersonRevision consults the same filter before a
	// request that misses the answer cache comes here, and the check is one per request.
	s.members.Count(checked)
	if ok {
		return s.withOverlay(key, projectID, distinctID, p), nil
	}
	v, err, _ := s.flight.Do("p"+strconv.FormatInt(projectID, 10)+":"+strconv.FormatInt(version, 10)+":"+distinctID, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
		defer cancel()
		start, forgotten, epoch := time.Now(), s.forgotten.Load(), s.replaced.Load()
		resp, err := s.lookup.LookupPerson(ctx, &syncpb.LookupPersonRequest{ProjectId: projectID, DistinctId: distinctID})
		s.observe("person", start, err)
		if err != nil {
			return nil, err
		}
		p := &Person{projectID: projectID, distinctID: strings.Clone(distinctID), version: version, epoch: epoch, Found: resp.Found, StaticCohorts: resp.StaticCohortIds,
			HashKeyOverrides: resp.HashKeyOverrides, Revision: Revision{Stored: s.revisions.Add(1)}}
		if len(resp.Properties) > 0 {
			if err := json.Unmarshal(resp.Properties, &p.Properties); err != nil {
				return nil, err
			}
		}
		s.storePerson(key, p)
		if !p.Found && s.forgotten.Load() != forgotten {
			// The control plane stored a key meanwhile, maybe this one: the cache's deletes
			// apply in order with its sets, so this one cannot outlive a later forget.
			s.persons.Delete(key)
		}
		return p, nil
	})
	if err != nil {
		return nil, err
	}
	return s.withOverlay(key, projectID, distinctID, v.(*Person)), nil
}

// cachedPerson returns what Person answers without asking the control plane, before the
// overlay: nobody when the control plane stores nothing about the person (its membership
// filter says so, or this edge created it and it was not announced since), else the cached
// look-up; false when the control plane must be asked. It also returns what the membership
// filter said, for the caller to count.
func (s *Store) cachedPerson(key uint64, projectID, version int64, memberships bool, distinctID string) (*Person, bloomset.Result, bool) {
	r := s.members.CheckPerson(projectID, distinctID)
	if r == bloomset.Absent || (r == bloomset.Present && s.createdHere(projectID, distinctID)) {
		return nobody, r, true
	}
	if p, ok := s.persons.Get(key); ok && p.projectID == projectID && p.distinctID == distinctID && (!memberships || p.version >= version) &&
		(p.Found || p.epoch == s.replaced.Load()) {
		return p, r, true
	}
	return nil, r, false
}

// PersonRevision returns the revision of what Person would answer now, and the person's hash
// key overrides, when Person would answer without asking the control plane (ok false when it
// would ask: then nothing computed before from the person can be known current). It takes
// the same arguments and consults the same filters and caches, without allocating. It does not
// count the membership check: Person does, and a request whose answer is not kept calls both.
func (s *Store) PersonRevision(projectID, version int64, memberships bool, distinctID string) (rev Revision, overrides map[string]string, ok bool) {
	key := cache.Key(projectID, distinctID)
	p, _, ok := s.cachedPerson(key, projectID, version, memberships, distinctID)
	if !ok {
		return Revision{}, nil, false
	}
	rev = p.Revision
	if ov, found := s.overlays.Get(key); found && ov.projectID == projectID && ov.distinctID == distinctID {
		rev.Overlay = ov.revision
	}
	return rev, p.HashKeyOverrides, true
}

// nobody is a person with nothing stored: its Revision is zero.
var nobody = &Person{}

// forgetPerson drops what is cached about distinctID: the control plane has just stored it
// (a cached "not found" would now be wrong).
func (s *Store) forgetPerson(projectID int64, distinctID string) {
	s.forgotten.Add(1)
	key := cache.Key(projectID, distinctID)
	s.persons.Delete(key)
	s.originated.remove(key)
}

// forgetGroup drops what is cached about a group the control plane has just stored.
func (s *Store) forgetGroup(projectID int64, typeIndex int, key string) {
	s.forgotten.Add(1)
	s.groups.Delete(groupKey(projectID, GroupRef{TypeIndex: typeIndex, Key: key}))
}

// withOverlay returns p, the person behind distinctID, with what this edge captured about
// it applied. The overlay is applied as the person is read, never baked into the cache: an
// update captured while a look-up was in flight is then not lost for the cache's lifetime.
func (s *Store) withOverlay(key uint64, projectID int64, distinctID string, p *Person) *Person {
	if ov, ok := s.overlays.Get(key); ok && ov.projectID == projectID && ov.distinctID == distinctID {
		return ov.apply(p)
	}
	return p
}

func (s *Store) storePerson(key uint64, p *Person) {
	if p.Found {
		s.persons.Set(key, p)
	} else {
		s.persons.SetWithTTL(key, p, s.cfg.NegativeTTL)
	}
}

// ApplyPersonUpdate records property changes this edge captured ($set, $set_once, $unset)
// in the person's overlay, which is applied over every read of the person until the control
// plane has surely stored them, so that a /decide right after an identify sees them.
func (s *Store) ApplyPersonUpdate(projectID int64, distinctID string, set, setOnce flags.Properties, unset []string) {
	key := cache.Key(projectID, distinctID)
	// Two captures of one person at once must not lose one's changes: the read, change and
	// write of its overlay happen under one of a few locks, chosen by key.
	mu := &s.overlayLocks[key%uint64(len(s.overlayLocks))]
	mu.Lock()
	defer mu.Unlock()
	ov := &overlay{projectID: projectID, distinctID: strings.Clone(distinctID), set: flags.Properties{}, setOnce: flags.Properties{},
		revision: s.revisions.Add(1)}
	if old, ok := s.overlays.Get(key); ok && old.projectID == projectID && old.distinctID == distinctID {
		for k, v := range old.set {
			ov.set[k] = v
		}
		for k, v := range old.setOnce {
			ov.setOnce[k] = v
		}
		ov.unset = append(ov.unset, old.unset...)
	}
	for k, v := range setOnce {
		if _, ok := ov.setOnce[k]; !ok {
			ov.setOnce[k] = v
		}
	}
	for k, v := range set {
		ov.set[k] = v
		ov.unset = slices.DeleteFunc(ov.unset, func(u string) bool { return u == k })
	}
	for _, k := range unset {
		delete(ov.set, k)
		delete(ov.setOnce, k)
		ov.unset = append(ov.unset, k)
	}
	s.overlays.Set(key, ov)
	// Applied before the event is acknowledged, so the SDK's next /decide sees it.
	s.overlays.Wait()
}

// apply returns a copy of p with the overlay's changes.
func (ov *overlay) apply(p *Person) *Person {
	out := *p
	out.Found, out.Revision.Overlay = true, ov.revision
	out.Properties = make(flags.Properties, len(p.Properties)+len(ov.set)+len(ov.setOnce))
	for k, v := range p.Properties {
		out.Properties[k] = v
	}
	for k, v := range ov.setOnce {
		if _, ok := out.Properties[k]; !ok {
			out.Properties[k] = v
		}
	}
	for k, v := range ov.set {
		out.Properties[k] = v
	}
	for _, k := range ov.unset {
		delete(out.Properties, k)
	}
	return &out
}

// SetHashKeyOverrides records hashKey for flagKeys (first write wins) and returns the
// person's overrides; the cached person is updated.
func (s *Store) SetHashKeyOverrides(ctx context.Context, projectID int64, distinctID, hashKey string, flagKeys []string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	start := time.Now()
	resp, err := s.lookup.SetHashKeyOverrides(ctx, &syncpb.SetHashKeyOverridesRequest{
		ProjectId: projectID, DistinctId: distinctID, HashKey: hashKey, FlagKeys: flagKeys})
	s.observe("hash_key_overrides", start, err)
	if err != nil {
		return nil, err
	}
	// The control plane now stores the person (it may have just created it): the filter must
	// say so before the next /decide, which is to find these overrides.
	s.members.Add(projectID, bloomkeys.PersonKey(nil, distinctID))
	key := cache.Key(projectID, distinctID)
	if old, ok := s.persons.Get(key); ok && old.projectID == projectID && old.distinctID == distinctID {
		p := *old
		p.Found, p.HashKeyOverrides, p.Revision = true, resp.HashKeyOverrides, Revision{Stored: s.revisions.Add(1)}
		s.persons.Set(key, &p)
	}
	return resp.HashKeyOverrides, nil
}

// GroupRef names a group to look up.
type GroupRef struct {
	TypeIndex int
	Name      string // the group type's name
	Key       string
	// Revision is set by Groups to the Revision.Stored of what it answered about the group.
	Revision uint64
}

// Groups returns the stored properties of the given groups by group type name; groups that
// do not exist are absent. Cached groups are not asked for again. It sets each ref's Revision.
func (s *Store) Groups(ctx context.Context, projectID int64, refs []GroupRef) (map[string]flags.Properties, error) {
	out := make(map[string]flags.Properties, len(refs))
	req := &syncpb.LookupGroupsRequest{ProjectId: projectID}
	var missing []int // indexes in refs
	for i := range refs {
		r := &refs[i]
		g, checked, ok := s.cachedGroup(projectID, *r)
		s.members.Count(checked) // here, not in cachedGroup: as in Person
		if !ok {
			missing = append(missing, i)
			req.Groups = append(req.Groups, &syncpb.GroupKey{GroupTypeIndex: int32(r.TypeIndex), GroupKey: r.Key})
			continue
		}
		r.Revision = g.revision
		if g.properties != nil {
			out[r.Name] = g.properties
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	start, forgotten, epoch := time.Now(), s.forgotten.Load(), s.replaced.Load()
	resp, err := s.lookup.LookupGroups(ctx, req)
	s.observe("groups", start, err)
	if err != nil {
		return nil, err
	}
	found := map[GroupRef]flags.Properties{}
	for _, g := range resp.Groups {
		var props flags.Properties
		if err := json.Unmarshal(g.Properties, &props); err != nil {
			return nil, err
		}
		if props == nil {
			props = flags.Properties{}
		}
		found[GroupRef{TypeIndex: int(g.GroupTypeIndex), Key: g.GroupKey}] = props
	}
	for _, i := range missing {
		r := &refs[i]
		props := found[GroupRef{TypeIndex: r.TypeIndex, Key: r.Key}]
		entry := &group{projectID: projectID, typeIndex: r.TypeIndex, key: strings.Clone(r.Key), properties: props, epoch: epoch,
			revision: s.revisions.Add(1)}
		r.Revision = entry.revision
		if props != nil {
			out[r.Name] = props // r.Name is the snapshot's, not the request's
			s.groups.Set(groupKey(projectID, *r), entry)
		} else {
			s.groups.SetWithTTL(groupKey(projectID, *r), entry, s.cfg.NegativeTTL)
			if s.forgotten.Load() != forgotten { // as in Person
				s.groups.Delete(groupKey(projectID, *r))
			}
		}
	}
	return out, nil
}

// absentGroup is what is known of a group the control plane stores nothing about: its
// revision is zero.
var absentGroup = &group{}

// cachedGroup returns what Groups answers about r without asking the control plane:
// absentGroup when the membership filter says nothing is stored, else the cached look-up;
// false when the control plane must be asked. It also returns what the membership filter said,
// for the caller to count.
func (s *Store) cachedGroup(projectID int64, r GroupRef) (*group, bloomset.Result, bool) {
	m := s.members.CheckGroup(projectID, r.TypeIndex, r.Key)
	if m == bloomset.Absent {
		return absentGroup, m, true // nothing stored: the group has no properties
	}
	if g, ok := s.groups.Get(groupKey(projectID, r)); ok && g.projectID == projectID && g.typeIndex == r.TypeIndex && g.key == r.Key &&
		(g.properties != nil || g.epoch == s.replaced.Load()) {
		return g, m, true
	}
	return nil, m, false
}

// GroupRevision returns the Revision.Stored that Groups would set on r now, when Groups would
// answer r without asking the control plane (ok false when it would ask), without allocating.
// Like PersonRevision it does not count the membership check.
func (s *Store) GroupRevision(projectID int64, r GroupRef) (rev uint64, ok bool) {
	g, _, ok := s.cachedGroup(projectID, r)
	if !ok {
		return 0, false
	}
	return g.revision, true
}

func groupKey(projectID int64, r GroupRef) uint64 {
	return cache.Key(projectID, r.Key) ^ (uint64(r.TypeIndex+1) * 0xBF58476D1CE4E5B9)
}

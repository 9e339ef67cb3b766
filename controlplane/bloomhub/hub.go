// Package bloomhub keeps, for every project, the Bloom filter of the keys the control plane
// stores (persons' distinct ids, groups) and streams it to the edges: whole when a stream
// starts or a filter is rebuilt, then each key as its transaction commits. An edge that finds
// a key absent answers /decide without a look-up.
//
// Exactness rests on one ordering: the filters are built from the tables only after the
// LISTEN on the announcements is in place, and every announcement processed after the build
// is added after it. A key committed before the build's snapshot is in the build; one
// committed after is announced after, and added. A key seen twice is harmless.
package bloomhub

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/shared/bloomkeys"
)

// Source reads the keys filters are built from.
type Source interface {
	// ScanMembers reads, in one snapshot, the number of keys of each project (every project
	// when projectID is 0, else that one), then every key.
	ScanMembers(ctx context.Context, projectID int64, sized func(projectID int64, n int), key func(projectID int64, k []byte)) error
}

// maxPendingKeys bounds what one stream may have queued: past it, the stream is sent whole
// filters instead of additions, which are bounded by the filters' size.
const maxPendingKeys = 1 << 20

// filter is a project's filter as the hub holds it.
type filter struct {
	bloom    *bloom.BloomFilter
	keys     int // keys added, counting repeats
	capacity int
	// encoded is the filter as streams are sent it whole, encoded once for all of them; nil
	// until a stream needs it and again once keys are added.
	encoded *Filter
}

// whole returns the filter encoded to be sent whole, encoding it once however many streams
// it is queued for. h.mu is held.
func (f *filter) whole(id int64) *Filter {
	if f.encoded == nil {
		raw, err := f.bloom.MarshalBinary() // cannot fail: it writes to memory
		if err != nil {
			panic("bloomhub: encode filter: " + err.Error())
		}
		f.encoded = &Filter{ProjectID: id, Raw: raw, Keys: f.keys, Bytes: int(f.bloom.Cap() / 8)}
	}
	return f.encoded
}

// Hub holds the filters and the streams that follow them.
type Hub struct {
	src Source
	log *slog.Logger

	mu      sync.Mutex
	ready   bool // filters are complete: built after the LISTEN, every announcement since applied
	filters map[int64]*filter
	subs    map[*Sub]struct{}

	rebuilds  prometheus.Counter
	keys      prometheus.Counter
	buildTime prometheus.Histogram
}

// NewHub returns a hub that builds filters from src. It holds none until Resync.
func NewHub(src Source, log *slog.Logger, reg prometheus.Registerer) *Hub {
	h := &Hub{src: src, log: log, filters: map[int64]*filter{}, subs: map[*Sub]struct{}{},
		rebuilds: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_controlplane_membership_rebuilds_total",
			Help: "Membership filters of single projects rebuilt from the tables (grown past capacity, or a key too long to announce)."}),
		keys: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_controlplane_membership_announced_keys_total",
			Help: "Keys announced by the database and added to membership filters."}),
		buildTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flagedge_controlplane_membership_build_seconds",
			Help: "Time to build every project's membership filter from the tables.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
	}
	if reg != nil {
		reg.MustRegister(h.rebuilds, h.keys, h.buildTime)
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_controlplane_membership_filter_bytes",
			Help: "Bytes of all membership filters held."}, h.filterBytes))
	}
	return h
}

func (h *Hub) filterBytes() float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, f := range h.filters {
		n += int(f.bloom.Cap() / 8)
	}
	return float64(n)
}

// Resync rebuilds every filter from the tables. Call it once the LISTEN on the announcements
// is in place, and again whenever that connection was lost (announcements may have been
// missed): meanwhile streams are told to drop their filters, so edges look keys up.
func (h *Hub) Resync(ctx context.Context) error {
	h.mu.Lock()
	h.ready = false
	for sub := range h.subs {
		sub.reset()
	}
	h.mu.Unlock()

	start := time.Now()
	built := map[int64]*filter{}
	err := h.src.ScanMembers(ctx, 0, func(id int64, n int) {
		built[id] = &filter{bloom: bloomkeys.NewFilter(n), capacity: bloomkeys.Capacity(n)}
	}, func(id int64, k []byte) {
		if f := built[id]; f != nil {
			f.bloom.Add(k)
			f.keys++
		}
	})
	if err != nil {
		return fmt.Errorf("build membership filters: %w", err)
	}
	h.buildTime.Observe(time.Since(start).Seconds())

	h.mu.Lock()
	defer h.mu.Unlock()
	h.filters, h.ready = built, true
	for sub := range h.subs {
		h.sendAll(sub)
	}
	h.log.Info("membership filters built", "projects", len(built), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// Lost says announcements can no longer be trusted to arrive (the LISTEN connection is
// lost): every stream is told to drop its filters at once, and none is sent until Resync
// has rebuilt them.
func (h *Hub) Lost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready = false
	for sub := range h.subs {
		sub.reset()
	}
}

// Announce adds keys the database announced for a project, or rebuilds the project's filter
// from the tables when rebuild is set (the keys did not fit in a notification) or the filter
// is past its capacity. It is called in the order of the announcements, by the goroutine
// that reads them: an error means the filter may lack keys, and the caller must Resync.
func (h *Hub) Announce(ctx context.Context, projectID int64, keys [][]byte, rebuild bool) error {
	h.mu.Lock()
	if !h.ready {
		h.mu.Unlock()
		return nil // the next Resync reads everything
	}
	f := h.filters[projectID]
	if f == nil { // a project created since the build: every key it has is announced
		f = &filter{bloom: bloomkeys.NewFilter(0), capacity: bloomkeys.Capacity(0)}
		h.filters[projectID] = f
		for sub := range h.subs {
			sub.whole(projectID, f) // the keys below follow as additions
		}
	}
	for _, k := range keys {
		f.bloom.Add(k)
	}
	f.keys += len(keys)
	f.encoded = nil
	h.keys.Add(float64(len(keys)))
	// The keys go out as additions even when a rebuild follows; a stream that has not taken
	// them by then gets them within the whole filter instead, and an edge that receives a
	// whole filter forgets every "not found" it cached. One Addition is shared by every
	// stream.
	add := &Addition{ProjectID: projectID, Keys: keys}
	for sub := range h.subs {
		sub.add(add, h)
	}
	rebuild = rebuild || f.keys > f.capacity
	h.mu.Unlock()
	if rebuild {
		return h.rebuild(ctx, projectID)
	}
	return nil
}

// Ensure gives a project the hub has no filter for an empty one, and sends it. Call it for
// every project the database is seen to have (the snapshot notifications): a project the
// last build did not see was created after it, so every key it has is announced, and an
// empty filter plus the announcements is exact.
func (h *Hub) Ensure(projectID int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ready || h.filters[projectID] != nil {
		return
	}
	f := &filter{bloom: bloomkeys.NewFilter(0), capacity: bloomkeys.Capacity(0)}
	h.filters[projectID] = f
	for sub := range h.subs {
		sub.whole(projectID, f)
	}
}

// rebuild reads one project's keys into a new filter sized for them and sends it whole. It
// runs on the announcements' goroutine, so no announcement is applied meanwhile: any key
// committed before its snapshot is read, any after is announced after.
func (h *Hub) rebuild(ctx context.Context, projectID int64) error {
	h.rebuilds.Inc()
	var f *filter
	err := h.src.ScanMembers(ctx, projectID, func(_ int64, n int) {
		f = &filter{bloom: bloomkeys.NewFilter(n), capacity: bloomkeys.Capacity(n)}
	}, func(_ int64, k []byte) {
		f.bloom.Add(k)
		f.keys++
	})
	if err != nil {
		return fmt.Errorf("rebuild membership filter of project %d: %w", projectID, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if f == nil { // the project is gone
		delete(h.filters, projectID)
		return nil
	}
	h.filters[projectID] = f
	for sub := range h.subs {
		sub.whole(projectID, f)
	}
	return nil
}

// Subscribe returns a stream's queue: it starts with a reset and, when the filters are
// complete, every filter whole; then every change. It holds only the projects serves
// accepts (every project when serves is nil): an edge scoped to some projects learns nothing
// of the others' keys.
func (h *Hub) Subscribe(serves func(projectID int64) bool) *Sub {
	sub := &Sub{serves: serves, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[sub] = struct{}{}
	sub.reset()
	if h.ready {
		h.sendAll(sub)
	}
	return sub
}

// Unsubscribe forgets a stream's queue.
func (h *Hub) Unsubscribe(sub *Sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, sub)
}

// sendAll queues every filter whole for sub. h.mu is held.
func (h *Hub) sendAll(sub *Sub) {
	for id, f := range h.filters {
		sub.whole(id, f)
	}
}

// Sub is one stream's queue of membership changes. It is bounded: additions beyond
// maxPendingKeys turn into whole filters.
type Sub struct {
	serves  func(projectID int64) bool // nil: every project
	mu      sync.Mutex
	q       Changes // what is queued, in the order Changes says
	pending int     // keys in q.Additions
	wake    chan struct{}
}

// Wake is signalled when the queue has something.
func (s *Sub) Wake() <-chan struct{} { return s.wake }

func (s *Sub) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Sub) reset() {
	s.mu.Lock()
	s.q, s.pending = Changes{Reset: true, Filters: map[int64]*Filter{}}, 0
	s.mu.Unlock()
	s.signal()
}

// whole queues f as it is now (encoded once for every stream), which replaces whatever
// additions of the project are queued. h.mu is held.
func (s *Sub) whole(projectID int64, f *filter) {
	if s.serves != nil && !s.serves(projectID) {
		return
	}
	enc := f.whole(projectID)
	s.mu.Lock()
	s.q.Filters[projectID] = enc
	s.q.Additions = slices.DeleteFunc(s.q.Additions, func(a *Addition) bool {
		if a.ProjectID == projectID {
			s.pending -= len(a.Keys)
			return true
		}
		return false
	})
	s.mu.Unlock()
	s.signal()
}

// add queues an addition; past maxPendingKeys, every filter of h is queued whole instead
// (h.mu is held by the caller).
func (s *Sub) add(a *Addition, h *Hub) {
	if s.serves != nil && !s.serves(a.ProjectID) {
		return
	}
	s.mu.Lock()
	if s.pending+len(a.Keys) > maxPendingKeys {
		s.mu.Unlock()
		h.sendAll(s)
		return
	}
	s.q.Additions = append(s.q.Additions, a)
	s.pending += len(a.Keys)
	s.mu.Unlock()
	s.signal()
}

// Changes is what a stream has to send, in this order: drop every filter (Reset), install
// the whole filters (as they were when queued), add the keys (in the order announced).
type Changes struct {
	Reset     bool
	Filters   map[int64]*Filter
	Additions []*Addition
}

// Filter is a whole filter to send. It is made once and shared by every stream it is queued
// for: it must not be changed.
type Filter struct {
	ProjectID int64
	Raw       []byte // the filter's MarshalBinary encoding
	Keys      int
	Bytes     int // the size of its bit array
	enc       encoded
}

// Encoded returns encode(f), computed once however many streams send f.
func (f *Filter) Encoded(encode func(*Filter) []byte) []byte {
	f.enc.once.Do(func() { f.enc.b = encode(f) })
	return f.enc.b
}

// Addition is the keys one announcement added to a project's filter. It is made once and
// shared by every stream it is queued for: it must not be changed.
type Addition struct {
	ProjectID int64
	Keys      [][]byte
	enc       encoded
}

// Encoded returns encode(a), computed once however many streams send a.
func (a *Addition) Encoded(encode func(*Addition) []byte) []byte {
	a.enc.once.Do(func() { a.enc.b = encode(a) })
	return a.enc.b
}

// encoded is how a stream sends a change, made by the first stream to send it.
type encoded struct {
	once sync.Once
	b    []byte
}

// Take empties the queue.
func (s *Sub) Take() Changes {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.q
	s.q, s.pending = Changes{Filters: map[int64]*Filter{}}, 0
	return c
}

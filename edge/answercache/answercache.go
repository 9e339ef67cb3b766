// Package answercache keeps encoded /decide and /flags answers for returning users, so that a
// request the edge answered before is answered again by copying bytes instead of evaluating
// every flag (posthog-js asks for every flag on every page load of the same user: at 1,000
// flags an answer is about 21 KB and costs about 200 µs to compute).
//
// An answer may only be given again to a request that would compute the very same answer
// now. So its key holds every input of the computation, as edge/decide gathers them:
//
//   - the compiled snapshot it came from: the project and its state.Project.Generation (not
//     only its version: a control plane restored from a backup hands out versions again);
//   - the endpoint and the query arguments that choose the answer's shape: /decide or /flags,
//     ?v= and ?config=;
//   - the whole decoded request body, byte for byte: token, distinct_id, $anon_distinct_id,
//     $device_id, person_properties, groups, group_properties, geoip_disable, disable_flags,
//     flag_keys_to_evaluate, evaluation_runtime and evaluation_contexts, and whatever else it
//     holds (how the body was sent — gzip, lz64, base64, form, GET ?data= — changes nothing
//     once decoded, and is not in the key);
//   - the runtime the request comes from, as told from its headers when the body names none
//     (User-Agent, Origin, Referer, Sec-Fetch-*), when some flag is for one runtime;
//   - the client's address, as --trusted-proxies finds it, unless the body disables GeoIP or
//     the edge has no GeoIP database: its $geoip_* properties are the database's answer for
//     it, which does not change while the edge runs;
//   - when the flags need stored person properties (or experience continuity needs the
//     person's hash key overrides), the revision of what edge/persons answers about the person
//     (persons.Revision: the cached look-up, its overrides and static cohorts included, and the
//     overlay of what this edge captured); likewise of each group whose stored properties the
//     flags need.
//
// The key's bytes are kept in the entry and compared on a hit, so that two keys with one
// 64-bit hash never give one user another's answer.
//
// Answers that depend on the clock expire: a relative date ("-7d", on the filter's side or
// the person's) moves with it, so the engine tells, for the dates an answer compared, the
// first instant at which one comparison could come out otherwise (flags.Request.Until), and
// the entry expires then; an answer whose comparisons it cannot bound is not kept.
//
// What is never kept: an answer of a snapshot with a pattern matched with a time limit
// (flags.Snapshot.TimeLimited: its answer depends on how fast it was computed); an answer that
// changed what is stored (a hash key override written); an answer with
// errorsWhileComputingFlags (a look-up failed). Such requests bypass the cache. A request
// whose stored person or groups are not cached at the edge is computed (the look-up made) and
// kept under what the look-up found. The parts of
// an answer that are new for every request (the flags v2 requestId and evaluatedAt) are
// written afresh on each hit, and each hit counts its flag evaluations as the first answer did
// (evalcount.Project.CountSlots).
package answercache

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/edge/cache"
)

// Entry is one kept answer. It is immutable once stored.
type Entry struct {
	key []byte
	// Answer is the encoded answer up to its fresh part: the whole answer, or for the flags
	// v2 shape everything before its requestId.
	Answer []byte
	// Fresh reports whether the answer ends with members new for every request, which the
	// caller writes after Answer.
	Fresh bool
	// Slots are the answer's evaluations as evalcount value slots (evalcount.Project's
	// AnswerSlots), counted again by each hit.
	Slots []int32
}

// entryOverhead is what an entry costs beyond its key, answer and slots: the struct and its
// slices' headers, and ristretto's own bookkeeping (which NewBytes adds on top).
const entryOverhead = int64(unsafe.Sizeof(Entry{}))

func (e *Entry) size() int64 {
	return entryOverhead + int64(len(e.key)+len(e.Answer)+4*len(e.Slots))
}

// typicalEntryBytes sizes the admission counters: an answer of a few hundred flags.
const typicalEntryBytes = 8 << 10

// Cache holds answers, bounded by their bytes. A nil *Cache keeps nothing.
type Cache struct {
	c *cache.Cache[*Entry]
	// seen is the doorkeeper of Put when answers are kept from their second sighting: the
	// last key hash offered in each slot (nil: every answer offered is kept).
	seen []atomic.Uint64
	// hits, misses and bypasses count requests: answered from the cache, computed and
	// offered to it, and computed without it (not reusable).
	hits, misses, bypasses prometheus.Counter
}

// doorkeeperSlots is how many key hashes the doorkeeper remembers (8 bytes each: 2 MiB). A
// returning user is kept when they come back before as many other requests overwrote their
// slot: on average 2^18 offers later, 26 s of 10,000 new users a second.
const doorkeeperSlots = 1 << 18

// New returns a cache of at most maxBytes of answers (nil when maxBytes is 0: no cache). Its
// entries expire only when their answers read the clock (Put's until): their keys say when
// they are no longer current, and what is no longer asked for is evicted by the bound. reg
// may be nil.
//
// With secondSighting, an answer is kept only when its key was offered before (a doorkeeper,
// as TinyLFU puts in front of its cache): a user seen once, as most of a stream of new
// users are, costs a hash and a slot's store instead of a copy of the answer and ristretto's
// admission work, which at 50 flags was as much again as computing the answer (pinned bench:
// 12.7–17.6k requests/s kept on first sighting against 5.9–9.9k, same binary, cache off). A
// returning user is answered from the cache from their third request instead of their second.
func New(maxBytes int64, secondSighting bool, m *cache.Metrics, reg prometheus.Registerer) (*Cache, error) {
	if maxBytes <= 0 {
		return nil, nil
	}
	c, err := cache.NewBytes("answers", maxBytes, typicalEntryBytes, 0, (*Entry).size, m)
	if err != nil {
		return nil, err
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_edge_answer_cache_requests_total",
		Help: "/decide and /flags requests by what the answer cache did: hit (answered from it), miss (computed, and kept " +
			"when it may be reused), bypass (computed: the answer may not be reused)."}, []string{"result"})
	if reg != nil {
		reg.MustRegister(requests)
	}
	ac := &Cache{c: c, hits: requests.WithLabelValues("hit"), misses: requests.WithLabelValues("miss"),
		bypasses: requests.WithLabelValues("bypass")}
	if secondSighting {
		ac.seen = make([]atomic.Uint64, doorkeeperSlots)
	}
	return ac, nil
}

// Get returns the entry kept under k, or nil. It counts a hit, not a miss: the caller counts
// the miss when it offers the answer (Put) or the bypass (Bypass).
func (c *Cache) Get(k *Key) *Entry {
	if c == nil {
		return nil
	}
	e, ok := c.c.Get(k.Sum())
	if !ok || !bytes.Equal(e.key, k.b) {
		return nil
	}
	c.hits.Inc()
	return e
}

// Put keeps an answer under k (copied; ristretto may decline it, and so does the doorkeeper
// on a key's first offer) until until (zero: until evicted), and counts a miss.
func (c *Cache) Put(k *Key, answer []byte, fresh bool, slots []int32, until time.Time) {
	if c == nil {
		return
	}
	c.misses.Inc()
	sum := k.Sum()
	if c.seen != nil {
		// Racing offers may overwrite each other's slot: the doorkeeper only decides what is
		// worth keeping, never what is answered.
		slot := &c.seen[sum%doorkeeperSlots]
		if mark := sum | 1; slot.Load() != mark {
			slot.Store(mark)
			return
		}
	}
	buf := make([]byte, len(k.b)+len(answer))
	copy(buf, k.b)
	copy(buf[len(k.b):], answer)
	e := &Entry{key: buf[:len(k.b):len(k.b)], Answer: buf[len(k.b):], Fresh: fresh, Slots: append([]int32(nil), slots...)}
	if until.IsZero() {
		c.c.Set(sum, e)
		return
	}
	// Expired a little early rather than late: the expiry is counted from a later clock
	// reading than until was.
	if ttl := time.Until(until) - time.Millisecond; ttl > 0 {
		c.c.SetWithTTL(sum, e, ttl)
	}
}

// Bypass counts a request whose answer may not be reused.
func (c *Cache) Bypass() {
	if c != nil {
		c.bypasses.Inc()
	}
}

// Wait applies pending Puts, so that the next Get sees them (for tests).
func (c *Cache) Wait() {
	if c != nil {
		c.c.Wait()
	}
}

// Close releases the cache.
func (c *Cache) Close() {
	if c != nil {
		c.c.Close()
	}
}

// Key is the canonical bytes of an answer's inputs, written field by field in a buffer the
// caller reuses: fixed-size numbers as they are, variable-size bytes after their length, so
// that two different sequences of fields never write the same bytes.
type Key struct {
	b []byte
}

// Reset empties the key, keeping its memory.
func (k *Key) Reset() { k.b = k.b[:0] }

// Len is the length of the key's bytes, to Truncate to.
func (k *Key) Len() int { return len(k.b) }

// Truncate drops what was appended after the key had n bytes.
func (k *Key) Truncate(n int) { k.b = k.b[:n] }

// Uint64 appends a number.
func (k *Key) Uint64(v uint64) { k.b = binary.LittleEndian.AppendUint64(k.b, v) }

// Bytes appends bytes after their length.
func (k *Key) Bytes(p []byte) {
	k.Uint64(uint64(len(p)))
	k.b = append(k.b, p...)
}

// String appends a string after its length.
func (k *Key) String(s string) {
	k.Uint64(uint64(len(s)))
	k.b = append(k.b, s...)
}

var seed = maphash.MakeSeed()

// Sum is the key's 64-bit hash, under which its entry is kept.
func (k *Key) Sum() uint64 { return maphash.Bytes(seed, k.b) }

package relay

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	gproto "google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/shared/bloomkeys"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// The WatchResponse fields a relay passes membership on in.
const (
	filterField   protowire.Number = 6 // membership_filters
	additionField protowire.Number = 7 // membership_additions
)

// maxChangeBytes bounds the log of changes the relay keeps for the streams that follow it;
// a stream that falls further behind is sent every filter whole instead.
const maxChangeBytes = 8 << 20

// foldBytes is the size up to which a project's additions are kept beside its filter
// (past the filter's own size): beyond it they are folded into a new encoding of the filter.
const foldBytes = 64 << 10

// diskGrace is how long filters read from disk wait for the relay's upstream before they are
// passed on: a relay restarted while its upstream is up gets fresh filters within a moment,
// and those it kept may lack keys stored while it was down. Past it the upstream counts as
// down, and edges behind the relay get what it kept: their look-ups could not reach the
// control plane anyway.
const diskGrace = 3 * time.Second

// held is a project's filter as the relay holds it: the membership_filters field to send, and
// the membership_additions fields received since.
type held struct {
	filter    []byte
	additions [][]byte
	addBytes  int
}

func (h *held) bytes() int64 { return int64(len(h.filter) + h.addBytes) }

// change is one field of the log the streams follow.
type change struct {
	project int64
	field   []byte
}

// Cursor is where a downstream stream is in the relay's membership: its zero value has been
// sent nothing but the reset that starts every stream.
type Cursor struct {
	epoch uint64
	seq   uint64
}

// Members holds the membership filters a relay passes on to the edges behind it: the last
// whole filter of each project and the additions since, encoded once for every stream. The
// streams follow a log of changes from a cursor each, so a change costs one encoding however
// many edges are behind. It is fed by the holder's tap (Tap), in the upstream stream's order,
// bounded in memory as the edge's own filters are (--membership-max-bytes, and the log by
// maxChangeBytes), and kept on disk so that a relay restarted while its upstream is down
// still passes filters on.
type Members struct {
	file string // "" for none
	max  int64  // 0: no cap
	log  *slog.Logger

	mu       sync.Mutex
	projects map[int64]*held
	bytes    int64    // of projects
	epoch    uint64   // bumped when filters are dropped: streams start over with a reset
	changes  []change // since first (sequence numbers first, first+1, …)
	first    uint64
	logBytes int
	offered  bool // the filters may be passed on (see diskGrace)
	changed  chan struct{}
	outBytes int64 // what the disk copy will hold once the writer is done

	// The disk copy is written by one goroutine (writeDisk), not under mu: a rewrite fsyncs
	// the whole file, and every stream's since and the upstream's Tap take mu. Tap leaves the
	// writer its work in pending, under mu; the writer owns out.
	pending   diskWork
	kick      chan struct{} // a send (never blocking: capacity 1) wakes the writer
	closed    bool
	stopped   chan struct{} // closed by Close: the writer finishes pending and exits
	exited    chan struct{} // closed by the writer as it exits
	writeFile func(path string, data []byte) error
	out       *os.File // the disk copy, appended to; nil without one (the writer's alone)
}

// diskWork is what the writer has yet to do to the disk copy: replace it with whole (when
// rewrite), then append appended. A rewrite Tap asks for replaces whatever was pending — its
// snapshot holds all of that — so a writer slower than the upstream writes the latest state
// once rather than every state in turn; appends queue behind the rewrite they follow, so the
// file never holds an addition before the filter it adds to.
type diskWork struct {
	rewrite  bool
	whole    [][]byte // the fields of every filter held, when rewrite
	appended []byte
}

func (w diskWork) empty() bool { return !w.rewrite && len(w.appended) == 0 }

// NewMembers returns the relay's membership filters, read from file when it holds some (they
// are passed on once the upstream has sent its own, or after diskGrace without it). maxBytes
// caps their memory (0: no cap).
func NewMembers(file string, maxBytes int64, log *slog.Logger) *Members {
	return newMembers(file, maxBytes, log, writeFileAtomic)
}

// newMembers is NewMembers writing whole disk copies with writeFile (tests slow it down).
func newMembers(file string, maxBytes int64, log *slog.Logger, writeFile func(path string, data []byte) error) *Members {
	m := &Members{file: file, max: maxBytes, log: log, projects: map[int64]*held{}, epoch: 1, changed: make(chan struct{}),
		kick: make(chan struct{}, 1), stopped: make(chan struct{}), exited: make(chan struct{}), writeFile: writeFile}
	if file != "" {
		if data, err := os.ReadFile(file); err == nil {
			m.load(data)
		} else if !errors.Is(err, os.ErrNotExist) {
			log.Warn("read the kept membership filters; passing none on until the upstream sends its own", "file", file, "err", err)
		}
	}
	if m.max > 0 && m.bytes > m.max {
		m.evict()
	}
	m.offered = len(m.projects) == 0
	if !m.offered {
		log.Info("membership filters read from disk; passed on if the upstream sends none first", "projects", len(m.projects), "after", diskGrace)
		time.AfterFunc(diskGrace, m.offer)
	}
	if file == "" {
		close(m.exited)
		return m
	}
	go m.writeDisk()
	m.mu.Lock()
	m.rewrite()
	m.mu.Unlock()
	return m
}

// load installs the fields of the disk copy, as far as they are whole: a torn end (the relay
// died while appending) is left out.
func (m *Members) load(data []byte) {
	err := syncpb.Walk(data, func(f syncpb.Field) error {
		m.apply(f.Num, f.Bytes, f.Raw)
		return nil
	})
	if err != nil {
		m.log.Warn("the kept membership filters end torn; kept what came before", "file", m.file, "err", err)
	}
}

// apply installs one received field (content is its message), without logging it for the
// streams. It reports the project it changed (0: none). m.mu is held, or m is not shared yet.
func (m *Members) apply(num protowire.Number, content, raw []byte) int64 {
	switch num {
	case filterField:
		var f syncpb.MembershipFilter
		if gproto.Unmarshal(content, &f) != nil {
			return 0
		}
		if old := m.projects[f.ProjectId]; old != nil {
			m.bytes -= old.bytes()
		}
		h := &held{filter: raw}
		m.projects[f.ProjectId] = h
		m.bytes += h.bytes()
		return f.ProjectId
	case additionField:
		var a syncpb.MembershipAdditions
		if gproto.Unmarshal(content, &a) != nil {
			return 0
		}
		h := m.projects[a.ProjectId]
		if h == nil {
			return 0 // no filter here: the edges behind look its keys up
		}
		h.additions = append(h.additions, raw)
		h.addBytes += len(raw)
		m.bytes += int64(len(raw))
		if h.addBytes > max(len(h.filter), foldBytes) {
			m.fold(a.ProjectId, h)
		}
		return a.ProjectId
	}
	return 0
}

// fold makes a project's filter and additions one filter again, so that what the relay holds
// stays about the filter's size. The additions already sent stay in the log. m.mu is held.
func (m *Members) fold(projectID int64, h *held) {
	var f syncpb.MembershipFilter
	if _, content, _ := cutField(h.filter); gproto.Unmarshal(content, &f) != nil {
		return
	}
	var keys [][]byte
	for _, raw := range h.additions {
		var a syncpb.MembershipAdditions
		if _, content, _ := cutField(raw); gproto.Unmarshal(content, &a) == nil {
			keys = append(keys, a.Keys...)
		}
	}
	enc, err := bloomkeys.Fold(f.Bloom, keys)
	if err != nil {
		m.log.Warn("fold membership additions", "project", projectID, "err", err)
		return
	}
	f.Bloom, f.Keys = enc, f.Keys+int64(len(keys))
	field, err := syncpb.EncodeField(filterField, &f)
	if err != nil {
		return
	}
	m.bytes -= h.bytes()
	h.filter, h.additions, h.addBytes = field, nil, 0
	m.bytes += h.bytes()
}

// cutField splits an encoded length-delimited field into its number and content.
func cutField(raw []byte) (protowire.Number, []byte, bool) {
	num, _, n := protowire.ConsumeTag(raw)
	if n < 0 {
		return 0, nil, false
	}
	content, m := protowire.ConsumeBytes(raw[n:])
	return num, content, m >= 0
}

// Tap takes the membership part of what the upstream sent, in its order: a reset (or the
// first message of a stream, which an upstream without filters sends without one) drops
// every filter, removed projects lose theirs, then whole filters, then additions.
func (m *Members) Tap(msg *syncpb.WatchResponse) {
	reset := msg.MembershipReset || msg.DatabaseId != ""
	if !reset && len(msg.RemovedProjects) == 0 && len(msg.MembershipFilters) == 0 && len(msg.MembershipAdditions) == 0 {
		return
	}
	var fields [][]byte
	for _, f := range msg.MembershipFilters {
		if field, err := syncpb.EncodeField(filterField, f); err == nil {
			fields = append(fields, field)
		}
	}
	for _, a := range msg.MembershipAdditions {
		if field, err := syncpb.EncodeField(additionField, a); err == nil {
			fields = append(fields, field)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rewrite := false
	if reset {
		m.projects, m.bytes, m.offered = map[int64]*held{}, 0, true
		m.restart()
		rewrite = true
	}
	for _, id := range msg.RemovedProjects {
		if h := m.projects[id]; h != nil {
			m.bytes -= h.bytes()
			delete(m.projects, id)
			rewrite = true
		}
	}
	var appended []byte
	for _, field := range fields {
		num, content, _ := cutField(field)
		if id := m.apply(num, content, field); id != 0 {
			m.changes = append(m.changes, change{project: id, field: field})
			m.logBytes += len(field)
			appended = append(appended, field...)
		}
	}
	if m.logBytes > maxChangeBytes { // streams this far behind are sent every filter whole
		m.first += uint64(len(m.changes))
		m.changes, m.logBytes = nil, 0
	}
	if m.max > 0 && m.bytes > m.max {
		m.evict()
		rewrite = true
	}
	if rewrite || m.outBytes > 2*m.bytes+foldBytes {
		m.rewrite()
	} else {
		m.append(appended)
	}
	m.signal()
}

// restart drops the log: every stream starts over with a reset. m.mu is held.
func (m *Members) restart() {
	m.epoch++
	m.first += uint64(len(m.changes))
	m.changes, m.logBytes = nil, 0
}

// evict drops the largest filters until the rest fit in m.max; the edges behind are told to
// drop theirs (a reset, and the filters kept). m.mu is held.
func (m *Members) evict() {
	for m.bytes > m.max && len(m.projects) > 0 {
		var largest int64
		var most int64 = -1
		for id, h := range m.projects {
			if b := h.bytes(); b > most {
				largest, most = id, b
			}
		}
		m.log.Warn("membership filter not passed on: over --membership-max-bytes; the edges behind look up every key of the project",
			"project", largest, "bytes", most, "max_bytes", m.max)
		delete(m.projects, largest)
		m.bytes -= most
	}
	m.restart()
}

// offer lets filters read from disk be passed on: the upstream sent none within diskGrace.
func (m *Members) offer() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.offered {
		m.offered = true
		m.log.Info("the upstream sent no membership filters yet: passing on those read from disk", "projects", len(m.projects))
		m.signal()
	}
}

// signal wakes the streams. m.mu is held.
func (m *Members) signal() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// append has the writer add fields to the disk copy. m.mu is held.
func (m *Members) append(fields []byte) {
	if m.file == "" || m.closed || len(fields) == 0 {
		return
	}
	m.pending.appended = append(m.pending.appended, fields...)
	m.outBytes += int64(len(fields))
	m.wake()
}

// rewrite has the writer replace the disk copy with what is held now. It copies only the
// list of fields: the fields themselves are never changed once encoded. m.mu is held.
func (m *Members) rewrite() {
	if m.file == "" || m.closed {
		return
	}
	w := diskWork{rewrite: true}
	m.outBytes = 0
	for _, h := range m.projects {
		w.whole = append(w.whole, h.filter)
		w.whole = append(w.whole, h.additions...)
		m.outBytes += h.bytes()
	}
	m.pending = w
	m.wake()
}

// wake tells the writer there is work pending, unless it was told already.
func (m *Members) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// writeDisk is the writer: it does the pending work until Close, then what is still pending.
func (m *Members) writeDisk() {
	defer close(m.exited)
	for {
		select {
		case <-m.kick:
		case <-m.stopped:
			m.mu.Lock()
			w := m.pending
			m.pending = diskWork{}
			m.mu.Unlock()
			m.do(w)
			if m.out != nil {
				m.out.Close()
			}
			return
		}
		m.mu.Lock()
		w := m.pending
		m.pending = diskWork{}
		m.mu.Unlock()
		m.do(w)
	}
}

// do writes w to the disk copy. A failed append rewrites the copy whole from what is held
// then; a failed rewrite leaves the file as it was and drops the appends until the next
// rewrite, so the file holds an older state rather than additions without their filter.
func (m *Members) do(w diskWork) {
	if w.empty() {
		return
	}
	if w.rewrite {
		if m.out != nil {
			m.out.Close()
			m.out = nil
		}
		var data []byte
		for _, f := range w.whole {
			data = append(data, f...)
		}
		if err := m.writeFile(m.file, data); err != nil {
			m.log.Warn("keep membership filters", "file", m.file, "err", err)
			return
		}
		out, err := os.OpenFile(m.file, os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			m.log.Warn("keep membership filters", "file", m.file, "err", err)
			return
		}
		m.out = out
	}
	if m.out == nil || len(w.appended) == 0 {
		return
	}
	if _, err := m.out.Write(w.appended); err != nil {
		m.log.Warn("keep membership filters", "file", m.file, "err", err)
		m.mu.Lock()
		m.rewrite()
		m.mu.Unlock()
	}
}

// Close writes what is pending to the disk copy, waiting for the writer, and closes it; the
// membership changes Tap takes after it are no longer kept. Without Close (the process killed)
// the disk copy lacks the changes not written yet: it holds an earlier state, or one whose
// torn end is dropped when read, and the upstream's filters replace it once it is reachable.
func (m *Members) Close() {
	m.mu.Lock()
	if !m.closed && m.file != "" {
		m.closed = true
		close(m.stopped)
	}
	m.mu.Unlock()
	<-m.exited
}

// since returns what a stream at cur has to send of the projects serves accepts, in order
// (whole filters, each followed by its additions, or the logged changes), whether it starts
// with a reset, the stream's next cursor, and the channel closed at the next change.
func (m *Members) since(cur Cursor, serves func(int64) bool) (fields [][]byte, reset bool, next Cursor, changed <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.offered {
		return nil, false, cur, m.changed
	}
	next = Cursor{epoch: m.epoch, seq: m.first + uint64(len(m.changes))}
	if cur.epoch == m.epoch && cur.seq >= m.first {
		for _, c := range m.changes[cur.seq-m.first:] {
			if serves(c.project) {
				fields = append(fields, c.field)
			}
		}
		return fields, false, next, m.changed
	}
	// A new stream, one the filters were dropped under, or one that fell behind the log:
	// every filter whole, which replaces the stream's (a reset first when it may hold
	// filters no longer kept here; a new stream's first message reset it).
	for id, h := range m.projects {
		if serves(id) {
			fields = append(fields, h.filter)
			fields = append(fields, h.additions...)
		}
	}
	return fields, cur.epoch != 0 && cur.epoch != m.epoch, next, m.changed
}

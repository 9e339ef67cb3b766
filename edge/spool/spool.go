// Package spool is the edge's durable capture buffer: segmented append-only files, each
// record framed with its length and a CRC-32C. Appends are made durable under a chosen fsync
// policy (group commit: one fsync serves every append waiting on it), bounded by a disk
// quota; a reader consumes records in order and acknowledges them, and a segment is deleted
// only once every record in it is acknowledged. On open, a torn record at the end of the
// last segment (a crash mid-write) is cut off.
package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SyncPolicy says when appended records reach stable storage.
type SyncPolicy int

// The policies.
const (
	// SyncInterval fsyncs every Options.SyncInterval; an append returns once written to the
	// file (it survives a crash of the process, not of the machine, until the next fsync).
	SyncInterval SyncPolicy = iota
	// SyncAlways returns from an append only after an fsync that covers it.
	SyncAlways
	// SyncNever leaves flushing to the operating system.
	SyncNever
)

// ParseSyncPolicy reads "always", "never" or a duration such as "10ms" (SyncInterval).
func ParseSyncPolicy(s string) (SyncPolicy, time.Duration, error) {
	switch s {
	case "always":
		return SyncAlways, 0, nil
	case "never":
		return SyncNever, 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, 0, fmt.Errorf("fsync policy %q: want always, never or an interval such as 10ms", s)
	}
	return SyncInterval, d, nil
}

// Options configure a spool.
type Options struct {
	Dir string
	// SegmentBytes: a segment is sealed once it holds this much; default 16 MiB, and at most
	// a quarter of the quota, so that a drained spool always has room (only the active
	// segment is left, and it is deleted once acknowledged when room is needed).
	SegmentBytes int64
	QuotaBytes   int64 // the most the spool may hold on disk; default 1 GiB
	Sync         SyncPolicy
	SyncInterval time.Duration // for SyncInterval; default 10 ms
	Registry     prometheus.Registerer
}

// Errors of Append.
var (
	ErrFull   = errors.New("spool is full")
	ErrClosed = errors.New("spool is closed")
)

// ErrCorrupt reports a record whose checksum or frame is wrong.
var ErrCorrupt = errors.New("corrupt spool record")

const (
	headerSize     = 8       // uint32 length, uint32 CRC-32C, little endian
	maxRecordBytes = 1 << 30 // a frame claiming more is corrupt
	segmentSuffix  = ".seg"
	cursorFile     = "cursor"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Cursor is a position in the spool: a segment and a byte offset in it.
type Cursor struct {
	Segment uint64
	Offset  int64
}

func (c Cursor) before(o Cursor) bool {
	return c.Segment < o.Segment || (c.Segment == o.Segment && c.Offset < o.Offset)
}

type segment struct {
	id   uint64
	size int64
}

// Spool is safe for concurrent appends and one reader. Appends take mu only for their own
// write; the reader's file reads and the acknowledgement's file writes and deletions happen
// outside it, so a forwarder draining a backlog does not delay capture.
type Spool struct {
	opts Options

	readMu     sync.Mutex // guards readFile and readFileID: the reader's open segment
	readFile   *os.File
	readFileID uint64
	ackMu      sync.Mutex // serialises Ack, which writes the cursor file outside mu

	mu       sync.Mutex // guards the fields below
	cond     *sync.Cond // signals sync progress to SyncAlways appenders
	active   *os.File
	segments []segment // on disk, oldest first; the last is the active one
	total    int64     // bytes on disk
	appended uint64    // records appended
	synced   uint64    // records known durable
	closed   bool
	acked    Cursor
	syncErr  error
	// pending counts the records after acked; marks says when they were appended (roughly:
	// one mark per ageMarkInterval, the oldest first), for the oldest record's age.
	pending int64
	marks   []ageMark

	wake     chan struct{} // new data for the reader; capacity 1
	syncWake chan struct{} // new data for the syncer (SyncAlways); capacity 1
	done     chan struct{}
	stopped  chan struct{}
	bufPool  sync.Pool

	metrics metrics
}

// ageMark records that the records from cursor on were appended at or after at.
type ageMark struct {
	cursor Cursor
	at     time.Time
}

// ageMarkInterval bounds the error of the oldest record's age and the marks kept: ten a
// second at most, whatever the append rate.
const ageMarkInterval = 100 * time.Millisecond

type metrics struct {
	pendingRecords prometheus.GaugeFunc
	oldestAge      prometheus.GaugeFunc
	bytes          prometheus.GaugeFunc
	appends        prometheus.Counter
	full           prometheus.Counter
	fsyncs         prometheus.Histogram
	corrupts       prometheus.Counter
}

// Open opens or creates the spool in opts.Dir, dropping acknowledged segments and a torn
// record at the end of the last one, and starts a new segment for appends.
func Open(opts Options) (*Spool, error) {
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = 16 << 20
	}
	if opts.QuotaBytes <= 0 {
		opts.QuotaBytes = 1 << 30
	}
	opts.SegmentBytes = max(min(opts.SegmentBytes, opts.QuotaBytes/4), 1)
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = 10 * time.Millisecond
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("open spool: %w", err)
	}
	s := &Spool{opts: opts, wake: make(chan struct{}, 1), syncWake: make(chan struct{}, 1),
		done: make(chan struct{}), stopped: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	s.bufPool.New = func() any { b := make([]byte, 0, 64<<10); return &b }
	if err := s.recover(); err != nil {
		return nil, fmt.Errorf("open spool: %w", err)
	}
	s.countBacklog()
	if err := s.rotateLocked(); err != nil {
		return nil, fmt.Errorf("open spool: %w", err)
	}
	s.registerMetrics()
	go s.syncLoop()
	return s, nil
}

func (s *Spool) registerMetrics() {
	m := &s.metrics
	m.bytes = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_spool_bytes", Help: "Bytes the capture spool holds on disk."},
		func() float64 { s.mu.Lock(); defer s.mu.Unlock(); return float64(s.total) })
	m.appends = prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_spool_appends_total", Help: "Records appended to the spool."})
	m.full = prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_spool_full_total", Help: "Appends refused because the spool was full."})
	m.fsyncs = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flagedge_edge_spool_fsync_seconds", Help: "fsync latency of the spool.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14)})
	m.corrupts = prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_spool_corrupt_records_total", Help: "Records skipped for a bad checksum or frame."})
	m.pendingRecords = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_spool_pending_records",
		Help: "Records in the capture spool not yet acknowledged by the control plane."},
		func() float64 { return float64(s.PendingRecords()) })
	m.oldestAge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_spool_oldest_pending_age_seconds",
		Help: "Age of the oldest record not yet acknowledged (0 when none), within a tenth of a second."},
		func() float64 { return s.OldestPendingAge().Seconds() })
	if s.opts.Registry != nil {
		s.opts.Registry.MustRegister(m.bytes, m.appends, m.full, m.fsyncs, m.corrupts, m.pendingRecords, m.oldestAge)
	}
}

func segmentName(id uint64) string { return fmt.Sprintf("%020d%s", id, segmentSuffix) }

func (s *Spool) path(id uint64) string { return filepath.Join(s.opts.Dir, segmentName(id)) }

// recover reads the directory: the acknowledged cursor, the segments, and the valid length
// of the last segment.
func (s *Spool) recover() error {
	if data, err := os.ReadFile(filepath.Join(s.opts.Dir, cursorFile)); err == nil {
		var seg, off uint64
		if _, err := fmt.Sscanf(string(data), "%d %d", &seg, &off); err == nil {
			s.acked = Cursor{Segment: seg, Offset: int64(off)}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	entries, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, segmentSuffix) {
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSuffix(name, segmentSuffix), 10, 64)
		if err != nil {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if id < s.acked.Segment {
			if err := os.Remove(s.path(id)); err != nil {
				return err
			}
			continue
		}
		s.segments = append(s.segments, segment{id: id, size: info.Size()})
	}
	slices.SortFunc(s.segments, func(a, b segment) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	if n := len(s.segments); n > 0 {
		last := &s.segments[n-1]
		valid, err := validLength(s.path(last.id))
		if err != nil {
			return err
		}
		if valid < last.size {
			if err := os.Truncate(s.path(last.id), valid); err != nil {
				return err
			}
			last.size = valid
		}
	}
	// A segment acknowledged to its end (the active one when the edge stopped) is not needed.
	if len(s.segments) > 0 && s.segments[0].id == s.acked.Segment && s.acked.Offset >= s.segments[0].size {
		if err := os.Remove(s.path(s.segments[0].id)); err != nil {
			return err
		}
		s.segments = s.segments[1:]
	}
	for _, seg := range s.segments {
		s.total += seg.size
	}
	return nil
}

// validLength returns the length of the longest prefix of whole, intact records.
func validLength(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var off int64
	var header [headerSize]byte
	var buf []byte
	for {
		if _, err := f.ReadAt(header[:], off); err != nil {
			return off, nil
		}
		n := int64(binary.LittleEndian.Uint32(header[0:4]))
		if n > maxRecordBytes {
			return off, nil
		}
		buf = slices.Grow(buf[:0], int(n))[:n]
		if _, err := f.ReadAt(buf, off+headerSize); err != nil {
			return off, nil
		}
		if crc32.Checksum(buf, castagnoli) != binary.LittleEndian.Uint32(header[4:8]) {
			return off, nil
		}
		off += headerSize + n
	}
}

// rotateLocked seals the active segment (made durable unless SyncNever) and starts a new one.
func (s *Spool) rotateLocked() error {
	var id uint64 = 1
	if n := len(s.segments); n > 0 {
		id = s.segments[n-1].id + 1
	}
	// After a restart that found every segment acknowledged (and removed them), the new
	// segment must still come after the acknowledged cursor: reusing its id would hide the
	// new segment's first records below the cursor's offset, and a lower id would hide it all.
	id = max(id, s.acked.Segment+1)
	// The new segment is opened before the old one is closed: if that fails (no file
	// descriptors, a full disk), appends go on into the old one.
	f, err := os.OpenFile(s.path(id), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if err := syncDir(s.opts.Dir); err != nil {
		f.Close()
		os.Remove(s.path(id))
		return err
	}
	if s.active != nil {
		if s.opts.Sync != SyncNever {
			start := time.Now()
			if err := s.active.Sync(); err != nil {
				f.Close()
				os.Remove(s.path(id))
				return err
			}
			s.metrics.fsyncs.Observe(time.Since(start).Seconds())
		}
		s.synced = s.appended
		s.cond.Broadcast()
		s.active.Close() // synced above; a close error loses nothing
	}
	s.active = f
	s.segments = append(s.segments, segment{id: id})
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Append adds records, all or none: it returns ErrFull when they would take the spool over
// its quota, and returns once they are as durable as the sync policy promises. A request's
// events go in together, so that a refused request leaves nothing behind to be stored twice
// when the SDK sends it again.
func (s *Spool) Append(records ...[]byte) error {
	bp := s.bufPool.Get().(*[]byte)
	frame := (*bp)[:0]
	defer func() { *bp = frame[:0]; s.bufPool.Put(bp) }()
	for _, record := range records {
		if len(record) > maxRecordBytes {
			return fmt.Errorf("record of %d bytes is too large", len(record))
		}
		var header [headerSize]byte
		binary.LittleEndian.PutUint32(header[0:4], uint32(len(record)))
		binary.LittleEndian.PutUint32(header[4:8], crc32.Checksum(record, castagnoli))
		frame = append(append(frame, header[:]...), record...)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.syncErr != nil {
		return fmt.Errorf("spool: %w", s.syncErr)
	}
	if s.total+int64(len(frame)) > s.opts.QuotaBytes {
		if err := s.reclaimLocked(); err != nil {
			return fmt.Errorf("spool rotate: %w", err)
		}
	}
	if s.total+int64(len(frame)) > s.opts.QuotaBytes {
		s.metrics.full.Inc()
		return ErrFull
	}
	last := &s.segments[len(s.segments)-1]
	if _, err := s.active.Write(frame); err != nil {
		// A partial frame would shift every later record: cut it off, or stop appending.
		if terr := s.active.Truncate(last.size); terr != nil {
			s.syncErr = fmt.Errorf("spool write failed and could not be undone: %w", terr)
		}
		return fmt.Errorf("spool write: %w", err)
	}
	if now := time.Now(); len(s.marks) == 0 || now.Sub(s.marks[len(s.marks)-1].at) >= ageMarkInterval {
		s.marks = append(s.marks, ageMark{cursor: Cursor{Segment: last.id, Offset: last.size}, at: now})
	}
	s.pending += int64(len(records))
	last.size += int64(len(frame))
	s.total += int64(len(frame))
	s.appended += uint64(len(records))
	me := s.appended
	s.metrics.appends.Add(float64(len(records)))
	if last.size >= s.opts.SegmentBytes {
		// The record is written: a failed rotation leaves the segment active, to be rotated
		// by a later append, and must not turn this append into an error (SDKs would send
		// the events again).
		_ = s.rotateLocked()
	}
	signal(s.wake)
	if s.opts.Sync == SyncAlways {
		signal(s.syncWake)
		for s.synced < me && s.syncErr == nil && !s.closed {
			s.cond.Wait()
		}
		if s.synced < me {
			if s.syncErr != nil {
				return fmt.Errorf("spool: %w", s.syncErr)
			}
			return ErrClosed
		}
	}
	return nil
}

// reclaimLocked makes room when the active segment is acknowledged to its end (the forwarder
// has caught up): it starts a new segment and deletes the old one. Without it, the forwarded
// part of the active segment would count against the quota until the segment filled up.
func (s *Spool) reclaimLocked() error {
	last := s.segments[len(s.segments)-1]
	if last.size == 0 || s.acked.Segment != last.id || s.acked.Offset < last.size {
		return nil
	}
	if err := s.rotateLocked(); err != nil {
		return err
	}
	if err := os.Remove(s.path(last.id)); err != nil {
		return err
	}
	s.segments = slices.DeleteFunc(s.segments, func(seg segment) bool { return seg.id == last.id })
	s.total -= last.size
	return nil
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// syncLoop makes appends durable: after each append in SyncAlways (one fsync serving every
// append that arrived meanwhile), every interval in SyncInterval.
func (s *Spool) syncLoop() {
	defer close(s.stopped)
	if s.opts.Sync == SyncNever {
		<-s.done
		return
	}
	var tick <-chan time.Time
	if s.opts.Sync == SyncInterval {
		t := time.NewTicker(s.opts.SyncInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.done:
			return
		case <-s.syncWake:
		case <-tick:
		}
		s.mu.Lock()
		f, target := s.active, s.appended
		s.mu.Unlock()
		if target == s.loadSynced() {
			continue
		}
		// fsync outside the lock so appends go on meanwhile; a rotation in between has
		// already synced and closed f, which os reports as ErrClosed.
		start := time.Now()
		err := f.Sync()
		s.metrics.fsyncs.Observe(time.Since(start).Seconds())
		s.mu.Lock()
		if err != nil && !errors.Is(err, os.ErrClosed) {
			s.syncErr = err
		} else if target > s.synced {
			s.synced = target
		}
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

func (s *Spool) loadSynced() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// Close makes every appended record durable and closes the spool. It is safe to call twice.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	close(s.done)
	<-s.stopped
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.opts.Sync != SyncNever {
		errs = append(errs, s.active.Sync())
	}
	errs = append(errs, s.active.Close())
	signal(s.wake)
	s.readMu.Lock()
	if s.readFile != nil {
		errs = append(errs, s.readFile.Close())
		s.readFile = nil
	}
	s.readMu.Unlock()
	return errors.Join(errs...)
}

// Acked returns the position up to which records were acknowledged.
func (s *Spool) Acked() Cursor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// Pending returns how many bytes are appended but not acknowledged.
func (s *Spool) Pending() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingBytesLocked()
}

func (s *Spool) pendingBytesLocked() int64 {
	var n int64
	for _, seg := range s.segments {
		switch {
		case seg.id > s.acked.Segment:
			n += seg.size
		case seg.id == s.acked.Segment:
			n += max(seg.size-s.acked.Offset, 0)
		}
	}
	return n
}

// Read returns the records after from, about maxBytes of them (at least one), and the cursor
// after the last. It waits for a record until done is closed (err is then io.EOF) or the
// spool is closed (ErrClosed). A corrupt record skips the rest of its segment and is counted.
func (s *Spool) Read(done <-chan struct{}, from Cursor, maxBytes int) (records [][]byte, next Cursor, err error) {
	for {
		records, next, err = s.readAvailable(from, maxBytes)
		if err != nil || len(records) > 0 {
			return records, next, err
		}
		select {
		case <-done:
			return nil, from, io.EOF
		case <-s.wake:
		}
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			if records, next, err = s.readAvailable(from, maxBytes); len(records) > 0 || err != nil {
				return records, next, err
			}
			return nil, from, ErrClosed
		}
	}
}

func (s *Spool) readAvailable(from Cursor, maxBytes int) ([][]byte, Cursor, error) {
	// What lies below a segment's known size never changes: read it without holding mu.
	s.mu.Lock()
	segments := slices.Clone(s.segments)
	s.mu.Unlock()
	s.readMu.Lock()
	defer s.readMu.Unlock()
	if from.Segment == 0 {
		from = Cursor{Segment: segments[0].id}
	}
	var records [][]byte
	size := 0
	for _, seg := range segments {
		if seg.id < from.Segment {
			continue
		}
		if seg.id > from.Segment {
			from = Cursor{Segment: seg.id}
		}
		for from.Offset < seg.size {
			rec, n, err := s.readRecord(seg.id, from.Offset, seg.size)
			if err != nil {
				if errors.Is(err, ErrCorrupt) {
					s.metrics.corrupts.Inc()
					from.Offset = seg.size // skip what cannot be framed
					break
				}
				return records, from, err
			}
			records = append(records, rec)
			from.Offset += n
			size += len(rec)
			if size >= maxBytes {
				return records, from, nil
			}
		}
	}
	return records, from, nil
}

// readRecord reads the record at off of segment id (whose size is known); readMu is held.
func (s *Spool) readRecord(id uint64, off, size int64) ([]byte, int64, error) {
	if s.readFile == nil || s.readFileID != id {
		if s.readFile != nil {
			s.readFile.Close()
		}
		f, err := os.Open(s.path(id))
		if err != nil {
			return nil, 0, err
		}
		s.readFile, s.readFileID = f, id
	}
	var header [headerSize]byte
	if size-off < headerSize {
		return nil, 0, ErrCorrupt
	}
	if _, err := s.readFile.ReadAt(header[:], off); err != nil {
		return nil, 0, err
	}
	n := int64(binary.LittleEndian.Uint32(header[0:4]))
	if n > maxRecordBytes || off+headerSize+n > size {
		return nil, 0, ErrCorrupt
	}
	rec := make([]byte, n)
	if _, err := s.readFile.ReadAt(rec, off+headerSize); err != nil {
		return nil, 0, err
	}
	if crc32.Checksum(rec, castagnoli) != binary.LittleEndian.Uint32(header[4:8]) {
		return nil, 0, ErrCorrupt
	}
	return rec, headerSize + n, nil
}

// countBacklog counts the records a reopened spool holds after its acknowledged cursor, and
// dates them by their segments' last writes.
func (s *Spool) countBacklog() {
	end := s.acked
	for _, seg := range s.segments {
		start := Cursor{Segment: seg.id}
		if seg.id == s.acked.Segment {
			start.Offset = s.acked.Offset
		}
		if seg.id < s.acked.Segment || start.Offset >= seg.size {
			continue
		}
		if info, err := os.Stat(s.path(seg.id)); err == nil {
			s.marks = append(s.marks, ageMark{cursor: start, at: info.ModTime()})
		}
		end = Cursor{Segment: seg.id, Offset: seg.size}
	}
	if len(s.marks) > 0 {
		s.pending = s.countRecords(s.marks[0].cursor, end, s.segments)
	}
}

// countRecords counts the records in [from, to) by walking their headers (the reader has just
// read them: they are in the page cache). segments lists the segments that may hold them.
func (s *Spool) countRecords(from, to Cursor, segments []segment) int64 {
	var n int64
	var header [headerSize]byte
	for _, seg := range segments {
		if seg.id < from.Segment || seg.id > to.Segment {
			continue
		}
		off, end := int64(0), seg.size
		if seg.id == from.Segment {
			off = from.Offset
		}
		if seg.id == to.Segment {
			end = min(end, to.Offset)
		}
		f, err := os.Open(s.path(seg.id))
		if err != nil {
			continue // deleted meanwhile: counted as nothing, corrected when the spool drains
		}
		for off+headerSize <= end {
			if _, err := f.ReadAt(header[:], off); err != nil {
				break
			}
			off += headerSize + int64(binary.LittleEndian.Uint32(header[0:4]))
			n++
		}
		f.Close()
	}
	return n
}

// PendingRecords returns how many records are appended but not acknowledged.
func (s *Spool) PendingRecords() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

// OldestPendingAge returns how long the oldest record not yet acknowledged has waited, or 0
// when there is none. Records from before a restart are dated by their segment's last write.
func (s *Spool) OldestPendingAge() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == 0 || len(s.marks) == 0 {
		return 0
	}
	return time.Since(s.marks[0].at)
}

// Ack records that everything before c is delivered: the cursor is saved, and segments that
// lie wholly before it are deleted (the active segment never is). The file work is done
// outside mu.
func (s *Spool) Ack(c Cursor) error {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.mu.Lock()
	if !s.acked.before(c) {
		s.mu.Unlock()
		return nil
	}
	from := s.acked
	s.acked = c
	var done []segment
	keep := s.segments[:0]
	for i, seg := range s.segments {
		if (seg.id < c.Segment || (seg.id == c.Segment && c.Offset >= seg.size)) && i < len(s.segments)-1 {
			done = append(done, seg)
			s.total -= seg.size
			continue
		}
		keep = append(keep, seg)
	}
	s.segments = keep
	// The last mark before c still dates the records after c that it covers.
	for len(s.marks) > 1 && !c.before(s.marks[1].cursor) {
		s.marks = s.marks[1:]
	}
	segments := slices.Clone(s.segments)
	s.mu.Unlock()
	n := s.countRecords(from, c, append(done, segments...))
	s.mu.Lock()
	s.pending = max(s.pending-n, 0)
	if s.pendingBytesLocked() == 0 { // a segment reclaimed meanwhile was not counted
		s.pending = 0
	}
	if s.pending == 0 {
		s.marks = s.marks[:0]
	}
	s.mu.Unlock()

	tmp := filepath.Join(s.opts.Dir, cursorFile+".tmp")
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d\n", c.Segment, c.Offset)), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(s.opts.Dir, cursorFile)); err != nil {
		return err
	}
	var errs []error
	s.readMu.Lock()
	for _, seg := range done {
		if s.readFile != nil && s.readFileID == seg.id {
			s.readFile.Close()
			s.readFile = nil
		}
		if err := os.Remove(s.path(seg.id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	s.readMu.Unlock()
	return errors.Join(errs...)
}

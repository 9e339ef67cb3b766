package state

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/edge/evalcount"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// view is an immutable set of projects, replaced as a whole on every change.
type view struct {
	byID    map[int64]*Project
	byToken map[string]*Project
}

// Holder holds the projects an edge serves. Reads are lock-free; updates are serialised.
type Holder struct {
	current atomic.Pointer[view]
	ready   atomic.Bool
	dir     string // where snapshots are kept; empty: memory only
	log     *slog.Logger

	mu sync.Mutex // serialises Apply and Load, and guards databaseID, pendingDatabaseID and generations
	// databaseID is the identity of the database the held snapshots came from; it is kept on
	// disk with them. pendingDatabaseID is the control plane's, from the start of the current
	// stream: it becomes databaseID once that stream's catch-up is complete, and not before,
	// so a copy on disk is never labelled with a database it is only partly from.
	databaseID, pendingDatabaseID string
	// generations counts the projects Apply compiled (Project.Generation); guarded by mu.
	generations uint64

	version  *prometheus.GaugeVec
	age      prometheus.GaugeFunc
	projects prometheus.GaugeFunc
	applied  prometheus.Counter
	lastSync atomic.Int64 // unix ms of the last applied change

	// changed is closed when the held projects change, and replaced by a new channel.
	changed atomic.Pointer[chan struct{}]

	counts *evalcount.Registry // nil: evaluations are not counted
	tap    Tap                 // nil: nobody passes the snapshots on

	connected     atomic.Bool  // a Watch stream is up and past its catch-up
	lostAt        atomic.Int64 // unix ms when the edge was last current (or started)
	connectedG    prometheus.GaugeFunc
	confirmedAgeG prometheus.GaugeFunc
}

// NewHolder returns an empty holder that persists snapshots under dir (none when empty).
func NewHolder(dir string, log *slog.Logger, reg prometheus.Registerer) *Holder {
	h := &Holder{dir: dir, log: log}
	h.current.Store(&view{byID: map[int64]*Project{}, byToken: map[string]*Project{}})
	ch := make(chan struct{})
	h.changed.Store(&ch)
	h.version = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flagedge_edge_snapshot_version",
		Help: "Snapshot version held per project."}, []string{"project"})
	h.age = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_snapshot_age_seconds",
		Help: "Seconds since the last snapshot change was applied."}, func() float64 {
		if ms := h.lastSync.Load(); ms > 0 {
			return time.Since(time.UnixMilli(ms)).Seconds()
		}
		return 0
	})
	h.projects = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_projects",
		Help: "Projects held."}, func() float64 { return float64(len(h.current.Load().byID)) })
	h.applied = prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_snapshots_applied_total",
		Help: "Project snapshots applied."})
	h.lostAt.Store(time.Now().UnixMilli())
	h.connectedG = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_control_plane_connected",
		Help: "1 while the edge's snapshot stream is up and caught up, else 0."}, func() float64 {
		if h.connected.Load() {
			return 1
		}
		return 0
	})
	h.confirmedAgeG = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_snapshot_confirmed_age_seconds",
		Help: "Seconds since the control plane last confirmed that the held snapshots are current: 0 while connected, else since the stream was lost."},
		func() float64 {
			if h.connected.Load() {
				return 0
			}
			return time.Since(time.UnixMilli(h.lostAt.Load())).Seconds()
		})
	if reg != nil {
		reg.MustRegister(h.version, h.age, h.projects, h.applied, h.connectedG, h.confirmedAgeG)
	}
	return h
}

// Tap sees what the holder applied, as it came: each message of the Watch stream after the
// holder applied it, its snapshots still deflated as received (and its membership filters, which
// the holder does not apply), and the snapshots read from
// disk or a bundle (as a message with InitialSyncDone set). A relay (package relay) passes
// the received bytes on to the edges behind it. The holder may have refused a snapshot
// (ByID tells which version it serves).
type Tap func(msg *syncpb.WatchResponse)

// SetTap makes tap see what the holder applies from now on. Call it before Load and Watch.
func (h *Holder) SetTap(tap Tap) { h.tap = tap }

// CountEvaluations gives every project installed from now on evaluation counters in r. Call
// it before Load and Watch.
func (h *Holder) CountEvaluations(r *evalcount.Registry) { h.counts = r }

// SetConnected records whether the edge is current with the control plane: its stream is up
// and past the catch-up (true), or has ended (false).
func (h *Holder) SetConnected(up bool) {
	if h.connected.Swap(up) && !up {
		h.lostAt.Store(time.Now().UnixMilli())
	}
}

// Connected reports whether the edge is current with the control plane.
func (h *Holder) Connected() bool { return h.connected.Load() }

// ByToken returns the project with the given public token, or nil.
func (h *Holder) ByToken(token string) *Project { return h.current.Load().byToken[token] }

// ByID returns the project with the given id, or nil.
func (h *Holder) ByID(id int64) *Project { return h.current.Load().byID[id] }

// Changed returns a channel that is closed at the next change of the held projects (a
// snapshot applied or a project removed), for those who must act on changes as they come,
// such as the OFREP change streams. Read the projects after taking the channel, not before,
// so that no change falls between the two.
func (h *Holder) Changed() <-chan struct{} { return *h.changed.Load() }

// Ready reports whether the holder has a snapshot to serve from: the control plane's initial
// sync completed, or snapshots were loaded from disk.
func (h *Holder) Ready() bool { return h.ready.Load() }

// Versions returns the version of every project held.
func (h *Holder) Versions() map[int64]int64 {
	v := h.current.Load()
	out := make(map[int64]int64, len(v.byID))
	for id, p := range v.byID {
		out[id] = p.Version
	}
	return out
}

// Apply installs a Watch message: new and changed projects, removals. A snapshot that does
// not compile is skipped (the previous version keeps serving) and reported.
func (h *Holder) Apply(msg *syncpb.WatchResponse) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.current.Load()
	next := &view{byID: maps.Clone(old.byID), byToken: maps.Clone(old.byToken)}
	var errs []error
	var changed []*Project
	var persist []*syncpb.ProjectSnapshot
	// Whatever the control plane sends is applied, older versions too: it sends only what
	// differs from what this edge holds, and it is the source of truth (a database restored
	// from a backup has older versions, and they are the ones to serve).
	for _, pb := range msg.Snapshots {
		p, err := compileProject(pb)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		h.generations++
		p.Generation = h.generations
		if h.counts != nil {
			p.Counts = h.counts.Install(p.ID, countDefinitions(p.Snapshot))
		}
		if cur, ok := next.byID[p.ID]; ok && next.byToken[cur.Token] == cur {
			delete(next.byToken, cur.Token)
		}
		next.byID[p.ID], next.byToken[p.Token] = p, p
		changed = append(changed, p)
		persist = append(persist, pb)
	}
	for _, id := range msg.RemovedProjects {
		if cur, ok := next.byID[id]; ok {
			delete(next.byID, id)
			h.counts.Remove(id)
			if next.byToken[cur.Token] == cur {
				delete(next.byToken, cur.Token)
			}
			h.version.DeleteLabelValues(strconv.FormatInt(id, 10))
		}
	}
	h.current.Store(next)
	if len(changed) > 0 || len(msg.RemovedProjects) > 0 {
		h.lastSync.Store(time.Now().UnixMilli())
		ch := make(chan struct{})
		close(*h.changed.Swap(&ch))
	}
	for _, p := range changed {
		h.version.WithLabelValues(strconv.FormatInt(p.ID, 10)).Set(float64(p.Version))
		h.applied.Inc()
	}
	errs = append(errs, h.persist(persist, msg.RemovedProjects)...)
	if msg.DatabaseId != "" {
		h.pendingDatabaseID = msg.DatabaseId
	}
	if msg.InitialSyncDone {
		h.ready.Store(true)
		if h.pendingDatabaseID != "" && h.pendingDatabaseID != h.databaseID {
			h.databaseID = h.pendingDatabaseID
			if h.dir != "" {
				if err := writeFileAtomic(filepath.Join(h.dir, databaseIDFile), []byte(h.databaseID+"\n")); err != nil {
					errs = append(errs, fmt.Errorf("persist database identity: %w", err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// databaseIDFile holds, beside the snapshots, the identity of the database they came from.
const databaseIDFile = "database-id"

// Bootstrap installs the snapshots of a verified bundle (package snapshotbundle) into a
// holder that has none, and makes it ready to serve them. It also takes the bundle's database
// identity, so that the edge's first Watch tells the control plane which versions it holds of
// which database and the catch-up replaces, adds and removes projects version by version. The
// identity is kept in memory only: the copies on disk stay unlabelled until a catch-up
// completes, so an edge restarted before that is sent everything afresh.
func (h *Holder) Bootstrap(msg *syncpb.WatchResponse) (int, error) {
	if len(h.current.Load().byID) > 0 {
		return 0, nil
	}
	err := h.Apply(&syncpb.WatchResponse{Snapshots: msg.Snapshots})
	h.mu.Lock()
	h.databaseID = msg.DatabaseId // what it holds now is from that database, whatever the disk said
	h.mu.Unlock()
	n := len(h.current.Load().byID)
	if n > 0 {
		h.ready.Store(true)
		if h.tap != nil {
			h.tap(&syncpb.WatchResponse{Snapshots: msg.Snapshots, InitialSyncDone: true})
		}
	}
	return n, err
}

// DatabaseID returns the identity of the database the held snapshots came from, or "" when
// unknown.
func (h *Holder) DatabaseID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.databaseID
}

// persist writes changed snapshots to disk atomically (temporary file, fsync, rename) and
// deletes removed ones.
func (h *Holder) persist(changed []*syncpb.ProjectSnapshot, removed []int64) []error {
	if h.dir == "" {
		return nil
	}
	var errs []error
	for _, pb := range changed {
		data, err := proto.Marshal(pb)
		if err == nil {
			err = writeFileAtomic(filepath.Join(h.dir, strconv.FormatInt(pb.ProjectId, 10)+".pb"), data)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("persist project %d: %w", pb.ProjectId, err))
		}
	}
	for _, id := range removed {
		if err := os.Remove(filepath.Join(h.dir, strconv.FormatInt(id, 10)+".pb")); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errs
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Load reads the snapshots kept on disk, so an edge started while the control plane is
// unreachable serves the last known flags. Unreadable files are skipped and reported. The
// holder is ready afterwards when it loaded any project.
func (h *Holder) Load() (int, error) {
	if h.dir == "" {
		return 0, nil
	}
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(h.dir)
	if err != nil {
		return 0, err
	}
	msg := &syncpb.WatchResponse{}
	var errs []error
	if data, err := os.ReadFile(filepath.Join(h.dir, databaseIDFile)); err == nil {
		h.mu.Lock()
		h.databaseID = strings.TrimSpace(string(data))
		h.mu.Unlock()
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".pb") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(h.dir, e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var pb syncpb.ProjectSnapshot
		if err := proto.Unmarshal(data, &pb); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.Name(), err))
			continue
		}
		msg.Snapshots = append(msg.Snapshots, &pb)
	}
	if err := h.Apply(msg); err != nil {
		errs = append(errs, err)
	}
	n := len(h.current.Load().byID)
	if n > 0 {
		h.ready.Store(true)
		if h.tap != nil {
			h.tap(&syncpb.WatchResponse{Snapshots: msg.Snapshots, InitialSyncDone: true})
		}
	}
	return n, errors.Join(errs...)
}

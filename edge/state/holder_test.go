package state_test

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/syncpb"
)

func snapshot(id, version int64, token string, filters string) *syncpb.ProjectSnapshot {
	return &syncpb.ProjectSnapshot{ProjectId: id, Version: version, ApiToken: token,
		Flags: []*syncpb.Flag{{Id: 1, Key: "f", Active: true, Filters: []byte(filters)}}}
}

func TestHolderAppliesAndPersists(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := state.NewHolder(dir, log, nil)
	if h.Ready() || h.ByToken("phc_a") != nil {
		t.Fatal("a new holder is empty and not ready")
	}
	if err := h.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{
		snapshot(1, 5, "phc_a", `{"groups": [{}]}`), snapshot(2, 1, "phc_b", `{"groups": []}`)}}); err != nil {
		t.Fatal(err)
	}
	if h.Ready() {
		t.Error("ready before the initial sync is done")
	}
	if err := h.Apply(&syncpb.WatchResponse{InitialSyncDone: true}); err != nil || !h.Ready() {
		t.Fatalf("not ready after the initial sync: %v", err)
	}
	// The control plane is the source of truth: an older version it sends (a database
	// restored from a backup) is served; a token rotation moves the project to its new token.
	if err := h.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{snapshot(1, 4, "phc_old", `{}`)}}); err != nil {
		t.Fatal(err)
	}
	if h.ByToken("phc_old") == nil || h.ByToken("phc_a") != nil || h.ByID(1).Version != 4 {
		t.Error("an older snapshot sent by the control plane was not served")
	}
	if err := h.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{snapshot(1, 6, "phc_rotated", `{"groups": [{}]}`)}}); err != nil {
		t.Fatal(err)
	}
	if h.ByToken("phc_a") != nil || h.ByToken("phc_rotated") == nil {
		t.Error("token rotation")
	}
	// A snapshot that does not compile is reported and the previous version keeps serving.
	if err := h.Apply(&syncpb.WatchResponse{Snapshots: []*syncpb.ProjectSnapshot{snapshot(2, 2, "phc_b", `{"groups": "bad"}`)}}); err == nil {
		t.Error("a bad snapshot was accepted")
	}
	if p := h.ByToken("phc_b"); p == nil || p.Version != 1 {
		t.Errorf("project 2 after a bad snapshot: %+v", p)
	}
	if err := h.Apply(&syncpb.WatchResponse{RemovedProjects: []int64{2}}); err != nil {
		t.Fatal(err)
	}
	if h.ByToken("phc_b") != nil {
		t.Error("a removed project is still served")
	}
	if got := h.Versions(); len(got) != 1 || got[1] != 6 {
		t.Errorf("versions %v", got)
	}

	// A new holder on the same directory serves what was kept, and is ready at once.
	files, _ := filepath.Glob(filepath.Join(dir, "*.pb"))
	if len(files) != 1 {
		t.Errorf("files on disk: %v", files)
	}
	if err := os.WriteFile(filepath.Join(dir, "9.pb"), []byte("not a snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	again := state.NewHolder(dir, log, nil)
	n, err := again.Load()
	if n != 1 || err == nil || !again.Ready() {
		t.Errorf("load: %d projects, %v, ready %v; want 1, a report of the bad file, ready", n, err, again.Ready())
	}
	if p := again.ByToken("phc_rotated"); p == nil || p.Version != 6 || p.Snapshot.Len() != 1 {
		t.Errorf("loaded project %+v", p)
	}
}

// A bundle is served by an empty holder, with its database's identity for the first Watch,
// and ignored by a holder that already serves something.
func TestHolderBootstrap(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := state.NewHolder(t.TempDir(), log, nil)
	bundle := &syncpb.WatchResponse{DatabaseId: "db-x", Snapshots: []*syncpb.ProjectSnapshot{snapshot(1, 3, "phc_a", `{"groups": [{}]}`)}}
	if n, err := h.Bootstrap(bundle); n != 1 || err != nil || !h.Ready() || h.DatabaseID() != "db-x" || h.Versions()[1] != 3 {
		t.Fatalf("bootstrap: %d %v ready %v database %q versions %v", n, err, h.Ready(), h.DatabaseID(), h.Versions())
	}
	if h.Connected() {
		t.Error("a bootstrapped holder counts itself connected")
	}
	later := &syncpb.WatchResponse{DatabaseId: "db-y", Snapshots: []*syncpb.ProjectSnapshot{snapshot(1, 1, "phc_a", `{"groups": []}`)}}
	if n, _ := h.Bootstrap(later); n != 0 || h.ByID(1).Version != 3 || h.DatabaseID() != "db-x" {
		t.Errorf("a second bundle replaced what is served: %d, version %d, database %q", n, h.ByID(1).Version, h.DatabaseID())
	}
}

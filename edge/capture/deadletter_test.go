package capture_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/edge/capture"
)

// TestDeadLettersAreBounded: the dead-letter files never hold more than their bound; what
// rotation drops is counted, also across a restart.
func TestDeadLettersAreBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead-letters.jsonl")
	const bound = capture.MinDeadLetterBytes
	record := bytes.Repeat([]byte{7}, 300<<10) // about 400 KB a line in base64
	reg := prometheus.NewRegistry()
	dl, err := capture.OpenDeadLetters(path, bound, reg)
	if err != nil {
		t.Fatal(err)
	}
	const added = 30
	for range added / 2 {
		if err := dl.Add("edge-1", record, errors.New("refused")); err != nil {
			t.Fatal(err)
		}
	}
	dl.Close()
	reg = prometheus.NewRegistry() // as after a restart
	if dl, err = capture.OpenDeadLetters(path, bound, reg); err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	for range added / 2 {
		if err := dl.Add("edge-1", record, errors.New("refused")); err != nil {
			t.Fatal(err)
		}
	}
	var size, kept int
	for _, p := range []string{path, path + ".1"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		size += len(b)
		kept += bytes.Count(b, []byte{'\n'})
	}
	if size > bound {
		t.Errorf("the dead-letter files hold %d bytes, bound %d", size, bound)
	}
	families, _ := reg.Gather()
	dropped := 0.0
	for _, f := range families {
		if f.GetName() == "flagedge_edge_dead_letters_dropped_total" {
			dropped = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	// Since the restart, the drops counted and the records kept account for all written
	// since then or kept from before.
	if kept == 0 || kept >= added || dropped == 0 {
		t.Errorf("%d records kept, %v dropped since the restart, of %d", kept, dropped, added)
	}
	if _, err := capture.OpenDeadLetters(path, 1<<20, nil); err == nil {
		t.Error("a bound below one record's room was accepted")
	}
}

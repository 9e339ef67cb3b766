package capture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DeadLetters is where the forwarder puts spool records the control plane refused for good:
// one JSON line per record, with the refusal and the record itself, appended and synced, so an
// operator can see them (and replay them once the cause is fixed) while the queue moves on.
//
// The file is bounded: with a maximum size, it is rotated when it reaches half of it (to
// path.1, replacing the previous one), so the two files hold at most the maximum, and the
// records of the replaced file are dropped and counted.
type DeadLetters struct {
	path     string
	maxBytes int64 // of the two files together; 0: unbounded, never rotated
	dropped  prometheus.Counter

	mu       sync.Mutex // guards the fields below
	file     *os.File
	size     int64 // of file
	lines    int64 // records in file
	oldLines int64 // records in path.1
}

// deadLetter is one line of the file.
type deadLetter struct {
	Time   time.Time `json:"time"`
	EdgeID string    `json:"edge_id"`
	Error  string    `json:"error"`
	Record []byte    `json:"record"` // an encoded syncpb.EventBatch, base64 in JSON
}

// MinDeadLetterBytes is the smallest bound of the dead-letter files: each half must hold
// the largest record (1 MB, 1.4 MB in base64) with room to spare.
const MinDeadLetterBytes = 4 << 20

// OpenDeadLetters opens (creating it) the dead-letter file at path, its size and path.1's
// bounded together by maxBytes (0: unbounded). What rotation drops is counted in reg (which
// may be nil).
func OpenDeadLetters(path string, maxBytes int64, reg prometheus.Registerer) (*DeadLetters, error) {
	if maxBytes != 0 && maxBytes < MinDeadLetterBytes {
		return nil, fmt.Errorf("dead letters: the bound must be 0 or at least %d bytes", MinDeadLetterBytes)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	d := &DeadLetters{path: path, maxBytes: maxBytes, dropped: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flagedge_edge_dead_letters_dropped_total",
		Help: "Dead-lettered records dropped from the dead-letter files by rotation (--dead-letter-max-bytes)."})}
	if reg != nil {
		reg.MustRegister(d.dropped)
	}
	var err error
	if d.oldLines, _, err = countLines(path + ".1"); err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	if d.lines, d.size, err = countLines(path); err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	if d.file, err = os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	return d, nil
}

// countLines returns the lines and bytes of the file at path; none when it does not exist.
func countLines(path string) (lines, size int64, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		lines += int64(bytes.Count(buf[:n], []byte{'\n'}))
		size += int64(n)
		if err == io.EOF {
			return lines, size, nil
		}
		if err != nil {
			return 0, 0, err
		}
	}
}

// Add appends record with the reason it was refused and syncs the file, rotating it first
// when the line would take it past half the bound.
func (d *DeadLetters) Add(edgeID string, record []byte, reason error) error {
	line, err := json.Marshal(deadLetter{Time: time.Now().UTC(), EdgeID: edgeID, Error: reason.Error(), Record: record})
	if err != nil {
		return err
	}
	line = append(line, '\n')
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.maxBytes > 0 && d.size > 0 && d.size+int64(len(line)) > d.maxBytes/2 {
		if err := d.rotate(); err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
	}
	if _, err := d.file.Write(line); err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	d.size += int64(len(line))
	d.lines++
	return d.file.Sync()
}

// rotate makes the current file path.1, dropping (and counting) the records of the one it
// replaces, and starts an empty file.
func (d *DeadLetters) rotate() error {
	if err := d.file.Close(); err != nil {
		return err
	}
	if err := os.Rename(d.path, d.path+".1"); err != nil {
		return err
	}
	d.dropped.Add(float64(d.oldLines))
	d.oldLines, d.lines, d.size = d.lines, 0, 0
	f, err := os.OpenFile(d.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	d.file = f
	return nil
}

// Close closes the file.
func (d *DeadLetters) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.file.Close()
}

package capture

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// DeadLetters is where the forwarder puts spool records the control plane refused for good:
// one JSON line per record, with the refusal and the record itself, appended and synced, so an
// operator can see them (and replay them once the cause is fixed) while the queue moves on.
type DeadLetters struct {
	mu   sync.Mutex // guards file
	file *os.File
}

// deadLetter is one line of the file.
type deadLetter struct {
	Time   time.Time `json:"time"`
	EdgeID string    `json:"edge_id"`
	Error  string    `json:"error"`
	Record []byte    `json:"record"` // an encoded syncpb.EventBatch, base64 in JSON
}

// OpenDeadLetters opens (creating it) the dead-letter file at path.
func OpenDeadLetters(path string) (*DeadLetters, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	return &DeadLetters{file: f}, nil
}

// Add appends record with the reason it was refused and syncs the file.
func (d *DeadLetters) Add(edgeID string, record []byte, reason error) error {
	line, err := json.Marshal(deadLetter{Time: time.Now().UTC(), EdgeID: edgeID, Error: reason.Error(), Record: record})
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.file.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	return d.file.Sync()
}

// Close closes the file.
func (d *DeadLetters) Close() error { return d.file.Close() }

package persons

import (
	"testing"
	"time"
)

func TestMarks(t *testing.T) {
	// A lifetime long enough that no step below outlasts half of it (a generation's rotation)
	// on a loaded machine, short enough to wait out at the end.
	m := newMarks(time.Second, 3)
	m.set(1, 7)
	if !m.has(1, 7) || m.has(1, 8) || m.has(2, 7) {
		t.Fatal("a mark is not what was set")
	}
	m.remove(1)
	if m.has(1, 7) {
		t.Fatal("a removed mark is still there")
	}
	for k := range uint64(3) {
		m.set(10+k, 1)
	}
	m.set(20, 1) // the full generation rotates: the three are in the older one
	for k := range uint64(3) {
		if !m.has(10+k, 1) {
			t.Fatalf("mark %d lost at the first rotation", 10+k)
		}
	}
	for k := range uint64(3) {
		m.set(30+k, 1) // rotates again: the first three are gone
	}
	if m.has(10, 1) {
		t.Fatal("more than two generations kept")
	}
	time.Sleep(1100 * time.Millisecond) // past a lifetime: every mark is gone
	if m.has(30, 1) || m.has(32, 1) {
		t.Fatal("marks outlive their lifetime")
	}
}

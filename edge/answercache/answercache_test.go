package answercache

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func key(parts ...string) *Key {
	k := &Key{}
	for _, p := range parts {
		k.String(p)
	}
	return k
}

// Fields are written after their lengths: moving bytes from one field to the next makes
// another key.
func TestKeyFieldsDoNotRunTogether(t *testing.T) {
	a, b := key("ab", "c"), key("a", "bc")
	if string(a.b) == string(b.b) || a.Sum() == b.Sum() {
		t.Error(`("ab", "c") and ("a", "bc") have one key`)
	}
	var c Key
	c.Bytes([]byte("ab"))
	c.Bytes([]byte("c"))
	if string(c.b) != string(a.b) {
		t.Error("Bytes and String write one field differently")
	}
	n := c.Len()
	c.Uint64(7)
	c.Truncate(n)
	if string(c.b) != string(a.b) {
		t.Error("Truncate did not drop what came after")
	}
}

func newCache(t *testing.T) (*Cache, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := New(1<<20, false, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, reg
}

// With the doorkeeper, a key's first offer keeps nothing and its second keeps the answer;
// another key offered in between does not make the first one's second offer a first.
func TestSecondSighting(t *testing.T) {
	c, err := New(1<<20, true, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.Put(key("user-1"), []byte(`{"a":1}`), false, nil, time.Time{})
	c.Wait()
	if c.Get(key("user-1")) != nil {
		t.Fatal("kept on its first sighting")
	}
	c.Put(key("user-2"), []byte(`{"a":2}`), false, nil, time.Time{})
	c.Put(key("user-1"), []byte(`{"a":1}`), false, nil, time.Time{})
	c.Wait()
	if e := c.Get(key("user-1")); e == nil || string(e.Answer) != `{"a":1}` {
		t.Fatalf("second sighting: %v", e)
	}
	if c.Get(key("user-2")) != nil {
		t.Fatal("user-2, seen once, kept")
	}
}

// A kept answer is found under its key, a copy of what was put, with its slots.
func TestPutThenGet(t *testing.T) {
	c, _ := newCache(t)
	answer, slots := []byte(`{"a":1}`), []int32{3, 5}
	c.Put(key("user-1"), answer, true, slots, time.Time{})
	c.Wait()
	answer[0], slots[0] = 'x', 9 // the caller's buffers are reused
	e := c.Get(key("user-1"))
	if e == nil {
		t.Fatal("not kept")
	}
	if diff := cmp.Diff(Entry{Answer: []byte(`{"a":1}`), Fresh: true, Slots: []int32{3, 5}}, *e, cmp.AllowUnexported(Entry{}),
		cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".key" }, cmp.Ignore())); diff != "" {
		t.Errorf("entry (-want +got):\n%s", diff)
	}
	if c.Get(key("user-2")) != nil {
		t.Error("another key found the entry")
	}
}

// An entry found under another key's hash (a collision) is not given: the whole key is
// compared.
func TestCollisionIsAMiss(t *testing.T) {
	c, _ := newCache(t)
	mine, theirs := key("user-1"), key("user-2")
	c.c.Set(theirs.Sum(), &Entry{key: mine.b, Answer: []byte("user-1's answer")}) // as if the hashes were equal
	c.c.Wait()
	if e := c.Get(theirs); e != nil {
		t.Errorf("user-2 given %q", e.Answer)
	}
}

// An answer kept until an instant is not given after it; one kept until an instant already
// past is not kept.
func TestPutUntil(t *testing.T) {
	c, _ := newCache(t)
	soon := time.Now().Add(time.Second) // far enough that the first Get comes before it on a loaded machine
	c.Put(key("soon"), []byte("a"), false, nil, soon)
	c.Put(key("past"), []byte("b"), false, nil, time.Now().Add(-time.Second))
	c.Wait()
	if c.Get(key("soon")) == nil {
		t.Fatal("not kept")
	}
	if c.Get(key("past")) != nil {
		t.Error("an answer past its time kept")
	}
	time.Sleep(time.Until(soon.Add(100 * time.Millisecond)))
	if c.Get(key("soon")) != nil {
		t.Error("given after its time")
	}
}

// A nil cache (--answer-cache-bytes 0) keeps nothing and counts nothing.
func TestNilCache(t *testing.T) {
	c, err := New(0, false, nil, nil)
	if err != nil || c != nil {
		t.Fatalf("New(0) = %v, %v", c, err)
	}
	c.Put(key("a"), []byte("x"), false, nil, time.Time{})
	c.Bypass()
	c.Wait()
	if c.Get(key("a")) != nil {
		t.Error("a nil cache gave an answer")
	}
}

// Requests are counted by result: Get counts hits, Put misses, Bypass bypasses.
func TestCounts(t *testing.T) {
	c, reg := newCache(t)
	c.Put(key("a"), []byte("x"), false, nil, time.Time{})
	c.Wait()
	c.Get(key("a"))
	c.Get(key("a"))
	c.Get(key("b")) // the caller then computes: Put or Bypass count it
	c.Bypass()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if diff := cmp.Diff(map[string]float64{"hit": 2, "miss": 1, "bypass": 1}, got); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

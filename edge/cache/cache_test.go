package cache_test

import (
	"testing"
	"time"

	"github.com/flagedge/flagedge/edge/cache"
)

// TestHoldsItsCapacity: a cache of n entries keeps (nearly) n of them, not n divided by
// ristretto's per-item overhead.
func TestHoldsItsCapacity(t *testing.T) {
	c, err := cache.New[int]("test", 10_000, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 8_000 {
		c.Set(uint64(i), i)
		if i%500 == 0 {
			c.Wait()
		}
	}
	c.Wait()
	kept := 0
	for i := range 8_000 {
		if v, ok := c.Get(uint64(i)); ok && v == i {
			kept++
		}
	}
	if kept < 7_500 {
		t.Errorf("kept %d of 8,000 entries in a cache of 10,000", kept)
	}
}

// TestBoundedByBytes: a cache bounded by bytes keeps what fits in its budget, counting each
// value's cost and ristretto's bookkeeping, whatever the number of entries; and holds its
// budget's worth of small values.
func TestBoundedByBytes(t *testing.T) {
	const budget = 1 << 20
	c, err := cache.NewBytes("test", budget, 1024, time.Hour, func(v []byte) int64 { return int64(len(v)) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	value := make([]byte, 4096)
	for i := range 10_000 { // 40 MB offered to a cache of 1 MiB
		c.Set(uint64(i), value)
		if i%200 == 0 {
			c.Wait()
		}
	}
	c.Wait()
	kept := 0
	for i := range 10_000 {
		if _, ok := c.Get(uint64(i)); ok {
			kept++
		}
	}
	if kept*len(value) > budget || kept < budget/len(value)/2 {
		t.Errorf("kept %d values of %d bytes in a budget of %d", kept, len(value), budget)
	}
}

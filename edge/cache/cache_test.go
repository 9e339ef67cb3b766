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

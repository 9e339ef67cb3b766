package spool_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/flagedge/flagedge/edge/spool"
)

// BenchmarkAppendWhileDraining measures capture's view of the spool while the forwarder drains
// a backlog: one goroutine reads and acknowledges the backlog in 4 MiB batches as fast as it
// can, while appends of 10 KiB records (a batch of ten events) go on, paced at about 2,000 a
// second, as capture traffic would. It reports the appends' p50, p99 and max latency.
// SPOOL_BACKLOG_MB sets the backlog (default 256; the closing figures used 1024).
func BenchmarkAppendWhileDraining(b *testing.B) {
	backlogMB := 256
	if v, err := strconv.Atoi(os.Getenv("SPOOL_BACKLOG_MB")); err == nil && v > 0 {
		backlogMB = v
	}
	for range b.N {
		dir := b.TempDir()
		s := open(b, dir, spool.Options{Dir: dir, Sync: spool.SyncInterval, SyncInterval: 10 * time.Millisecond, QuotaBytes: int64(backlogMB+256) << 20})
		rec := make([]byte, 10<<10)
		for range backlogMB * 100 {
			if err := s.Append(rec); err != nil {
				b.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		drained := make(chan int64)
		go func() {
			var n int64
			c := s.Acked()
			for ctx.Err() == nil {
				recs, next, err := s.Read(ctx.Done(), c, 4<<20)
				if err != nil {
					break
				}
				n += int64(len(recs))
				if err := s.Ack(next); err != nil {
					b.Error(err)
				}
				c = next
			}
			drained <- n
		}()
		var lat []time.Duration
		start := time.Now()
		for i := 0; time.Since(start) < 5*time.Second; i++ {
			t0 := time.Now()
			if err := s.Append(rec); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
			time.Sleep(time.Until(start.Add(time.Duration(i+1) * 500 * time.Microsecond)))
		}
		cancel()
		n := <-drained
		s.Close()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
		b.ReportMetric(float64(n), "drained-records")
	}
}

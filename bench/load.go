package main

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"
)

// request is one prepared request: method, URL, headers and body.
type request struct {
	method  string
	url     string
	body    []byte
	headers [][2]string
	events  int // events carried, for capture throughput
}

// load describes one measurement.
type load struct {
	name        string
	connections int           // closed loop: concurrent connections
	rate        int           // open loop: requests per second (0: closed loop)
	duration    time.Duration // bound in time
	maxRequests int64         // bound in count
	// next prepares the i-th request. In a closed loop its latency counts from when next
	// returned, so next may do untimed work first (the regions scenario captures an event).
	next         func(i int64) *request
	expectStatus int
	// check, when set, judges the body of each answer with the expected status, and is
	// called once after every next, with a nil body after a transport error or another
	// status. A non-empty verdict is counted under that name in the result's errors.
	check func(i int64, body []byte) string
}

// result is what a measurement gives.
type result struct {
	Name        string           `json:"name"`
	Mode        string           `json:"mode"`
	Connections int              `json:"connections,omitempty"`
	TargetRate  int              `json:"target_rate,omitempty"`
	Requests    int64            `json:"requests"`
	Events      int64            `json:"events,omitempty"`
	Seconds     float64          `json:"seconds"`
	Throughput  float64          `json:"requests_per_second"`
	EventsRate  float64          `json:"events_per_second,omitempty"`
	LatencyUs   map[string]int64 `json:"latency_us"`
	Errors      map[string]int64 `json:"errors,omitempty"`
	PerSecond   []int64          `json:"per_second"`
	Percentiles [][2]float64     `json:"percentile_curve"` // (percentile, latency µs)
	Ratio       float64          `json:"ratio_to_baseline,omitempty"`
}

// client is a fasthttp client for one host, over loopback only.
func newClient(addr string, conns int) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr: addr, MaxConns: conns + 8, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		MaxIdleConnDuration: time.Minute,
		Dial: func(addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return nil, errors.New("bench drives loopback addresses only: " + addr)
			}
			return fasthttp.DialTimeout(addr, 5*time.Second)
		},
	}
}

// run performs a load against client and returns its result. progress is called about once a
// second.
func run(c *fasthttp.HostClient, l load, progress func(string)) result {
	hist := hdrhistogram.New(1, 60_000_000, 3) // 1 µs to 60 s, 3 significant digits
	var histMu sync.Mutex
	var count, events atomic.Int64
	var errMu sync.Mutex
	errs := map[string]int64{}
	maxSeconds := int(l.duration/time.Second) + 2
	perSecond := make([]atomic.Int64, maxSeconds+1)
	start := time.Now()
	deadline := start.Add(l.duration)

	// do sends the i-th request; intended is when it was due (open loop), or zero for now.
	do := func(local *hdrhistogram.Histogram, i int64, intended time.Time) {
		r := l.next(i)
		if intended.IsZero() {
			intended = time.Now()
		}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.Header.SetMethod(r.method)
		req.SetRequestURI(r.url)
		for _, h := range r.headers {
			req.Header.Set(h[0], h[1])
		}
		req.SetBodyRaw(r.body)
		err := c.Do(req, resp)
		done := time.Now()
		status := resp.StatusCode()
		verdict := ""
		if l.check != nil {
			var body []byte
			if err == nil && status == l.expectStatus {
				body = resp.Body()
			}
			verdict = l.check(i, body)
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		_ = local.RecordValue(max(done.Sub(intended).Microseconds(), 1))
		if sec := int(done.Sub(start) / time.Second); sec < len(perSecond) {
			perSecond[sec].Add(1)
		}
		count.Add(1)
		switch {
		case err != nil:
			errMu.Lock()
			errs["transport: "+err.Error()]++
			errMu.Unlock()
		case status != l.expectStatus:
			errMu.Lock()
			errs["status "+strconv.Itoa(status)]++
			errMu.Unlock()
		case verdict != "":
			errMu.Lock()
			errs[verdict]++
			errMu.Unlock()
		default:
			events.Add(int64(r.events))
		}
	}
	stopProgress := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case now := <-t.C:
				progress(l.name + ": " + strconv.FormatInt(count.Load(), 10) + " requests, " +
					strconv.Itoa(int(now.Sub(start).Seconds())) + "s of " + l.duration.String())
			}
		}
	}()
	var seq atomic.Int64
	var wg sync.WaitGroup
	merge := func(local *hdrhistogram.Histogram) {
		histMu.Lock()
		hist.Merge(local)
		histMu.Unlock()
	}
	mode := "closed-loop"
	if l.rate <= 0 {
		for range l.connections {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := hdrhistogram.New(1, 60_000_000, 3)
				for time.Now().Before(deadline) {
					i := seq.Add(1) - 1
					if l.maxRequests > 0 && i >= l.maxRequests {
						break
					}
					do(local, i, time.Time{})
				}
				merge(local)
			}()
		}
	} else {
		// Open loop: the i-th request is due at start + i/rate, and its latency counts from
		// then, so time spent waiting behind slow requests is measured (no coordinated
		// omission). Workers are plentiful so that the schedule, not they, sets the pace.
		mode = "open-loop"
		due := make(chan time.Time, 1<<16)
		workers := max(l.connections, 64)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := hdrhistogram.New(1, 60_000_000, 3)
				for intended := range due {
					do(local, seq.Add(1)-1, intended)
				}
				merge(local)
			}()
		}
		interval := time.Second / time.Duration(l.rate)
		for i := int64(0); ; i++ {
			if l.maxRequests > 0 && i >= l.maxRequests {
				break
			}
			at := start.Add(time.Duration(i) * interval)
			if !at.Before(deadline) {
				break
			}
			if wait := time.Until(at); wait > 0 {
				time.Sleep(wait)
			}
			due <- at
		}
		close(due)
	}
	wg.Wait()
	close(stopProgress)
	elapsed := time.Since(start).Seconds()
	res := result{Name: l.name, Mode: mode, Connections: l.connections, TargetRate: l.rate, Requests: count.Load(),
		Events: events.Load(), Seconds: elapsed, Throughput: float64(count.Load()) / elapsed,
		EventsRate: float64(events.Load()) / elapsed, Errors: errs,
		LatencyUs: map[string]int64{"p50": hist.ValueAtQuantile(50), "p90": hist.ValueAtQuantile(90), "p99": hist.ValueAtQuantile(99),
			"p99.9": hist.ValueAtQuantile(99.9), "max": hist.Max()}}
	for i := range perSecond {
		if n := perSecond[i].Load(); n > 0 || i < int(elapsed) {
			res.PerSecond = append(res.PerSecond, n)
		}
	}
	for _, q := range []float64{0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 100} {
		res.Percentiles = append(res.Percentiles, [2]float64{q, float64(hist.ValueAtQuantile(q))})
	}
	return res
}

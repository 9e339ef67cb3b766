// Package admit decides whether the edge serves a request now or refuses it: rate limits
// per client address and per project, and the count of every refusal by reason. It decides
// only; each HTTP surface writes a refusal in its own error shape (the PostHog-compatible
// endpoints and OFREP differ), so a new route applies the same limits by calling it.
package admit

import (
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/flagedge/flagedge/edge/cache"
)

// Reason says why a request was refused; it is the label of the refusal counter.
type Reason string

// The reasons the edge refuses requests for.
const (
	RateLimitAddr    Reason = "rate_limit_addr"    // the client address is over --rate-limit-per-ip
	RateLimitProject Reason = "rate_limit_project" // the project is over --rate-limit-per-project
	Oversize         Reason = "oversize"           // the body, or what it holds, is over a limit (413)
	InflightBudget   Reason = "inflight_budget"    // --max-inflight-bytes stayed spent (503)
	ConnsPerAddr     Reason = "conns_per_addr"     // the address holds --max-conns-per-ip connections
	SpoolFull        Reason = "spool_full"         // the capture spool is at its quota (503)
)

// Refusal is a decision to refuse a request: why, and when it may be tried again.
type Refusal struct {
	Reason     Reason
	RetryAfter time.Duration
}

// Refusals counts refused requests by reason.
type Refusals struct {
	total *prometheus.CounterVec
}

// NewRefusals registers the refusal counter in reg (which may be nil).
func NewRefusals(reg prometheus.Registerer) *Refusals {
	r := &Refusals{total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_edge_refused_requests_total",
		Help: "Requests refused before they were served, by reason: rate_limit_addr, rate_limit_project, oversize, inflight_budget, conns_per_addr, spool_full."},
		[]string{"reason"})}
	for _, reason := range []Reason{RateLimitAddr, RateLimitProject, Oversize, InflightBudget, ConnsPerAddr, SpoolFull} {
		r.total.WithLabelValues(string(reason))
	}
	if reg != nil {
		reg.MustRegister(r.total)
	}
	return r
}

// Count counts one refusal for reason; a nil Refusals counts nothing.
func (r *Refusals) Count(reason Reason) {
	if r != nil {
		r.total.WithLabelValues(string(reason)).Inc()
	}
}

// RateConfig is the edge's rate limits; a zero rate turns its limit off.
type RateConfig struct {
	PerAddr    float64 // requests per second per client address
	PerProject float64 // requests per second per project
	Burst      int     // requests allowed at once above the rate (at least 1)
	// MaxTracked bounds the addresses (and projects) tracked at once: each costs about a
	// hundred bytes, and beyond it the least used are forgotten (and start afresh).
	MaxTracked int64
}

// DefaultMaxTracked tracks 100,000 addresses, about 10 MB at most.
const DefaultMaxTracked = 100_000

// Limiter applies the rate limits. A nil Limiter allows everything, at no cost.
type Limiter struct {
	cfg      RateConfig
	addrs    *cache.Cache[*rate.Limiter]
	projects *cache.Cache[*rate.Limiter]
	refusals *Refusals
}

// NewLimiter returns the limiter for cfg, or nil when both limits are off. refusals may be
// nil.
func NewLimiter(cfg RateConfig, refusals *Refusals, m *cache.Metrics) (*Limiter, error) {
	if cfg.PerAddr <= 0 && cfg.PerProject <= 0 {
		return nil, nil
	}
	cfg.Burst = max(cfg.Burst, 1)
	if cfg.MaxTracked <= 0 {
		cfg.MaxTracked = DefaultMaxTracked
	}
	l := &Limiter{cfg: cfg, refusals: refusals}
	var err error
	if cfg.PerAddr > 0 {
		if l.addrs, err = cache.New[*rate.Limiter]("rate_limit_addr", cfg.MaxTracked, refill(cfg.PerAddr, cfg.Burst), m); err != nil {
			return nil, err
		}
	}
	if cfg.PerProject > 0 {
		if l.projects, err = cache.New[*rate.Limiter]("rate_limit_project", cfg.MaxTracked, refill(cfg.PerProject, cfg.Burst), m); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// refill is how long a limiter takes to refill its burst: past it, a forgotten limiter and a
// new one are the same, so entries live that long.
func refill(perSecond float64, burst int) time.Duration {
	return max(time.Second, time.Duration(float64(burst)/perSecond*float64(time.Second)))
}

// Close stops the caches' goroutines.
func (l *Limiter) Close() {
	if l == nil {
		return
	}
	if l.addrs != nil {
		l.addrs.Close()
	}
	if l.projects != nil {
		l.projects.Close()
	}
}

// Addr decides on a request from the client address addr.
func (l *Limiter) Addr(addr netip.Addr, now time.Time) (Refusal, bool) {
	if l == nil || l.addrs == nil {
		return Refusal{}, true
	}
	b := addr.As16()
	return l.take(l.addrs, cache.BytesKey(b[:]), l.cfg.PerAddr, RateLimitAddr, now)
}

// Project decides on a request for the project projectID.
func (l *Limiter) Project(projectID int64, now time.Time) (Refusal, bool) {
	if l == nil || l.projects == nil {
		return Refusal{}, true
	}
	return l.take(l.projects, uint64(projectID), l.cfg.PerProject, RateLimitProject, now)
}

func (l *Limiter) take(c *cache.Cache[*rate.Limiter], key uint64, perSecond float64, reason Reason, now time.Time) (Refusal, bool) {
	lim, ok := c.Get(key)
	if !ok {
		lim = rate.NewLimiter(rate.Limit(perSecond), l.cfg.Burst)
		c.Set(key, lim)
		c.Wait() // the next request of this key must find it
	}
	if lim.AllowN(now, 1) {
		return Refusal{}, true
	}
	l.refusals.Count(reason) // a refused request takes no token
	wait := time.Duration((1 - lim.TokensAt(now)) / perSecond * float64(time.Second))
	return Refusal{Reason: reason, RetryAfter: wait}, false
}

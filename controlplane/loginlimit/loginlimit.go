// Package loginlimit keeps password logins from being a way to burn the control plane's CPU
// or to guess passwords. Every check of a password costs a bcrypt hash (a few hundred
// milliseconds of a core), so before one is spent a login must pass three gates: its client
// address has not failed too often (whatever emails it tried), its email has not failed too
// often (from whatever addresses), and fewer than MaxHashes hashes are running. Refusals
// cost nothing and are counted by reason.
//
// Failures are counted in two generations of fixed-size entries (a 64-bit keyed hash of the
// address or email and a count), each at most Entries long: memory stays bounded however
// many addresses and emails a flood makes up, and a full generation is retired early, which
// forgets the oldest failures rather than refusing to count new ones.
package loginlimit

import (
	"context"
	"hash/maphash"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config sets the limits.
type Config struct {
	// PerAddress is how many failed logins one client address may have within Window,
	// across every email it tries.
	PerAddress int
	// PerEmail is how many failed logins one email may have within Window, from every
	// address.
	PerEmail int
	// Window is how long a failure counts: between one and two windows, as generations turn.
	Window time.Duration
	// MaxHashes bounds the password hashes running at once; a login that finds them all
	// busy waits up to HashWait for one, then is refused.
	MaxHashes int
	HashWait  time.Duration
	// Entries bounds each generation of each table (addresses, emails).
	Entries int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Defaults: twenty failures an address and ten an email in fifteen minutes stop guessing and
// floods while forgiving typos (an office behind one NAT shares the address's twenty); one
// hash at a time leaves the other cores to the API; 10,000 entries a generation is well
// under 1 MB for the four maps.
var Defaults = Config{PerAddress: 20, PerEmail: 10, Window: 15 * time.Minute, MaxHashes: 1, HashWait: time.Second, Entries: 10000}

// Reasons a login is refused, the reason label of the refusals counter.
const (
	ReasonAddress = "address"
	ReasonEmail   = "email"
	ReasonBusy    = "busy"
)

// Refusal says why a login was refused and when to try again.
type Refusal struct {
	Reason     string
	RetryAfter time.Duration
}

// Limiter is the gates of password logins. Its methods are safe for concurrent use.
type Limiter struct {
	cfg       Config
	seed      maphash.Seed
	addresses *table
	emails    *table
	hashes    chan struct{} // a token per running hash
	waiters   chan struct{} // a token per login waiting for a hash
	refused   *prometheus.CounterVec
}

// New returns a limiter; its refusals are counted in reg (when not nil) as
// flagedge_controlplane_login_refusals_total.
func New(cfg Config, reg prometheus.Registerer) *Limiter {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.MaxHashes = max(cfg.MaxHashes, 1)
	l := &Limiter{cfg: cfg, seed: maphash.MakeSeed(),
		addresses: newTable(cfg.Entries, cfg.Window, cfg.Now()), emails: newTable(cfg.Entries, cfg.Window, cfg.Now()),
		hashes: make(chan struct{}, cfg.MaxHashes),
		// Logins waiting for a hash hold a goroutine and a connection each: a few per hash.
		waiters: make(chan struct{}, 8*cfg.MaxHashes),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_controlplane_login_refusals_total",
			Help: "Password logins refused before their password was checked, by reason: address or email (too many failures), busy (every password hash slot taken)."},
			[]string{"reason"}),
	}
	for _, r := range []string{ReasonAddress, ReasonEmail, ReasonBusy} {
		l.refused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(l.refused)
	}
	return l
}

// Attempt is a login admitted to check its password. It holds a hash slot until Failed or
// Succeeded is called, once.
type Attempt struct {
	l           *Limiter
	addr, email uint64 // email 0: none
}

// Begin admits a login from addr for email (compared without case or surrounding space; ""
// for a password check that names no account, such as setting one from an invitation), or
// refuses it. An admitted login must end with Failed, Succeeded or Done.
func (l *Limiter) Begin(ctx context.Context, addr netip.Addr, email string) (*Attempt, *Refusal) {
	a := &Attempt{l: l, addr: l.key(addr.String())}
	if email != "" {
		a.email = l.key(strings.ToLower(strings.TrimSpace(email)))
	}
	if r := l.gates(a); r != nil {
		return nil, r
	}
	if !l.takeHash(ctx) {
		return nil, l.refuse(ReasonBusy, time.Second)
	}
	// Failures recorded while this login waited for its hash count too: without this second
	// look, every login waiting when the limit was reached would still be checked.
	if r := l.gates(a); r != nil {
		<-l.hashes
		return nil, r
	}
	return a, nil
}

// gates checks the failures of the attempt's address and email (0: no email).
func (l *Limiter) gates(a *Attempt) *Refusal {
	now := l.cfg.Now()
	if left := l.addresses.blocked(a.addr, l.cfg.PerAddress, now); left > 0 {
		return l.refuse(ReasonAddress, left)
	}
	if a.email != 0 {
		if left := l.emails.blocked(a.email, l.cfg.PerEmail, now); left > 0 {
			return l.refuse(ReasonEmail, left)
		}
	}
	return nil
}

// takeHash takes a hash slot, waiting up to HashWait among at most 8 waiters a slot.
func (l *Limiter) takeHash(ctx context.Context) bool {
	select {
	case l.hashes <- struct{}{}:
		return true
	default:
	}
	select {
	case l.waiters <- struct{}{}:
	default:
		return false
	}
	defer func() { <-l.waiters }()
	t := time.NewTimer(l.cfg.HashWait)
	defer t.Stop()
	select {
	case l.hashes <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (l *Limiter) refuse(reason string, retryAfter time.Duration) *Refusal {
	l.refused.WithLabelValues(reason).Inc()
	return &Refusal{Reason: reason, RetryAfter: retryAfter}
}

func (l *Limiter) key(s string) uint64 { return maphash.String(l.seed, s) }

// Failed records a wrong password (or a login that cannot be anyone's) against the address
// and the email, and frees the hash slot.
func (a *Attempt) Failed() {
	now := a.l.cfg.Now()
	a.l.addresses.fail(a.addr, now)
	if a.email != 0 {
		a.l.emails.fail(a.email, now)
	}
	<-a.l.hashes
}

// Succeeded forgets the email's failures and frees the hash slot. The address keeps its
// failures: an account of one's own must not reset the count of guesses at others'.
func (a *Attempt) Succeeded() {
	a.l.emails.forget(a.email)
	<-a.l.hashes
}

// Done frees the hash slot of a login that ended before its password was judged (the
// database failed, say), counting nothing.
func (a *Attempt) Done() { <-a.l.hashes }

// table counts failures per key in two generations: cur since started, prev the window
// before. A key's failures are cur's plus prev's.
type table struct {
	mu        sync.Mutex
	entries   int
	window    time.Duration
	started   time.Time
	cur, prev map[uint64]uint32
}

func newTable(entries int, window time.Duration, now time.Time) *table {
	return &table{entries: max(entries, 1), window: window, started: now, cur: map[uint64]uint32{}, prev: map[uint64]uint32{}}
}

// turn retires generations older than the window. t.mu is held.
func (t *table) turn(now time.Time) {
	if now.Sub(t.started) < t.window {
		return
	}
	if now.Sub(t.started) >= 2*t.window {
		t.prev = map[uint64]uint32{}
	} else {
		t.prev = t.cur
	}
	t.cur, t.started = map[uint64]uint32{}, now
}

// blocked returns how long the key stays blocked at limit failures, or 0.
func (t *table) blocked(k uint64, limit int, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.turn(now)
	if int(t.cur[k])+int(t.prev[k]) < limit {
		return 0
	}
	// The failures in prev go at the next turn, those in cur at the one after.
	if int(t.cur[k]) < limit {
		return max(t.started.Add(t.window).Sub(now), time.Second)
	}
	return max(t.started.Add(2*t.window).Sub(now), time.Second)
}

func (t *table) fail(k uint64, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.turn(now)
	if _, ok := t.cur[k]; !ok && len(t.cur) >= t.entries {
		// Full: retire the generation early. The oldest failures are forgotten, never the
		// count of a new key refused.
		t.prev, t.cur, t.started = t.cur, map[uint64]uint32{}, now
	}
	if t.cur[k] < ^uint32(0) {
		t.cur[k]++
	}
}

func (t *table) forget(k uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.cur, k)
	delete(t.prev, k)
}

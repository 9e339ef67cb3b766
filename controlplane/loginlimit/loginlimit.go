// Package loginlimit keeps password logins from being a way to burn the control plane's CPU
// or to guess passwords. Every check of a password costs a bcrypt hash (a few hundred
// milliseconds of a core), so before one is spent a login must pass three gates: its client
// address has not failed too often (whatever emails it tried), its email has not failed too
// often (from whatever addresses), and fewer than MaxHashes hashes are running. Refusals
// cost no hash and are counted by reason.
//
// Failures are counted twice. A Store (PostgreSQL in production) counts every replica's, so
// that a load balancer spreading a guesser's tries over N replicas does not give it N times
// the limit; the gates read it. This replica's memory counts its own, read when there is no
// store or while it fails, in two generations of fixed-size entries (a 64-bit hash of the
// address or email and a count), each at most Entries long: memory stays bounded however
// many addresses and emails a flood makes up, and a full generation is retired early, which
// forgets the oldest failures rather than refusing to count new ones. The hash gate is this
// replica's alone: it protects this replica's CPU.
package loginlimit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
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
	// Entries bounds each generation of each table (addresses, emails) in memory.
	Entries int
	// Store shares the failure counts of every replica; nil counts this replica's alone.
	Store Store
	// Logger says when the store fails and when it answers again; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Key stands for a client address or an email in the failure counts: the first 8 bytes of
// the SHA-256 of its kind and value. The same on every replica, and not the value itself,
// so that the store holds no email or address in clear (a pseudonym: a guess of the value
// can be checked against it).
type Key int64

// keyOf returns the key of value, of kind "address" or "email".
func keyOf(kind, value string) Key {
	h := sha256.Sum256([]byte(kind + "\x00" + value))
	return Key(binary.BigEndian.Uint64(h[:8]))
}

// Store counts failures shared by every replica. A failure counts in the window it falls in:
// windows are Config.Window long and start at multiples of it (time.Truncate), so every
// replica agrees on them; a window's failures count while it is the current or the previous
// one, as a generation in memory does. Every method is one statement.
type Store interface {
	// Failures returns the counts of keys in the windows starting at since or later.
	Failures(ctx context.Context, since time.Time, keys ...Key) ([]Count, error)
	// Fail counts a failure for each key (all different) in the window starting at window,
	// and deletes a bounded number of the counts of windows that started before expired:
	// failures keep the store's size bounded.
	Fail(ctx context.Context, window, expired time.Time, keys ...Key) error
	// Forget deletes every count of key.
	Forget(ctx context.Context, key Key) error
}

// Count is a key's failures in the window starting at Window.
type Count struct {
	Key      Key
	Window   time.Time
	Failures int
}

// storeTimeout bounds each statement of the store: they take a millisecond, so a second means
// the database is in trouble, and the login goes on with this replica's counts.
const storeTimeout = time.Second

// Defaults returns the limits serve starts with: twenty failures an address and ten an email in fifteen minutes stop guessing and
// floods while forgiving typos (an office behind one NAT shares the address's twenty); one
// hash at a time leaves the other cores to the API; 10,000 entries a generation is well
// under 1 MB for the four maps.
func Defaults() Config {
	return Config{PerAddress: 20, PerEmail: 10, Window: 15 * time.Minute, MaxHashes: 1, HashWait: time.Second, Entries: 10000}
}

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
	addresses *table
	emails    *table
	hashes    chan struct{} // a token per running hash
	waiters   chan struct{} // a token per login waiting for a hash
	refused   *prometheus.CounterVec
	// storeErrors counts the store's failed statements by op; storeDown is set from a failure
	// until the next answer, so that an outage is logged once, not at every login.
	storeErrors *prometheus.CounterVec
	storeDown   atomic.Bool
}

// Operations of the store, the op label of the store errors counter.
const (
	opCheck  = "check"
	opFail   = "fail"
	opForget = "forget"
)

// New returns a limiter; its refusals are counted in reg (when not nil) as
// flagedge_controlplane_login_refusals_total, and its store's failed statements as
// flagedge_controlplane_login_limit_store_errors_total.
func New(cfg Config, reg prometheus.Registerer) *Limiter {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.MaxHashes = max(cfg.MaxHashes, 1)
	l := &Limiter{cfg: cfg,
		addresses: newTable(cfg.Entries, cfg.Window, cfg.Now()), emails: newTable(cfg.Entries, cfg.Window, cfg.Now()),
		hashes: make(chan struct{}, cfg.MaxHashes),
		// Logins waiting for a hash hold a goroutine and a connection each: a few per hash.
		waiters: make(chan struct{}, 8*cfg.MaxHashes),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_controlplane_login_refusals_total",
			Help: "Password logins refused before their password was checked, by reason: address or email (too many failures), busy (every password hash slot taken)."},
			[]string{"reason"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_controlplane_login_limit_store_errors_total",
			Help: "Statements on the failed-login counts shared by the replicas that failed, by op: check, fail, forget. Meanwhile logins are limited by this replica's own counts."},
			[]string{"op"}),
	}
	for _, r := range []string{ReasonAddress, ReasonEmail, ReasonBusy} {
		l.refused.WithLabelValues(r)
	}
	for _, op := range []string{opCheck, opFail, opForget} {
		l.storeErrors.WithLabelValues(op)
	}
	if reg != nil {
		reg.MustRegister(l.refused, l.storeErrors)
	}
	return l
}

// Attempt is a login admitted to check its password. It holds a hash slot until Failed or
// Succeeded is called, once.
type Attempt struct {
	l           *Limiter
	ctx         context.Context // the login's, without its cancellation: see Begin
	addr, email Key             // email 0: none
}

// Begin admits a login from addr for email (compared without case or surrounding space; ""
// for a password check that names no account, such as setting one from an invitation), or
// refuses it. An admitted login must end with Failed, Succeeded or Done.
func (l *Limiter) Begin(ctx context.Context, addr netip.Addr, email string) (*Attempt, *Refusal) {
	// A client that hangs up must neither keep its failure from being counted nor pass for
	// a failing store.
	a := &Attempt{l: l, ctx: context.WithoutCancel(ctx), addr: keyOf("address", addr.String())}
	if email != "" {
		a.email = keyOf("email", strings.ToLower(strings.TrimSpace(email)))
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

// gates checks the failures of the attempt's address and email (0: no email): every
// replica's in the store, or this replica's own when there is no store or it fails. A
// failing store thus leaves limits as loose as the number of replicas, rather than no login
// at all (or none refused) while the database has trouble.
func (l *Limiter) gates(a *Attempt) *Refusal {
	now := l.cfg.Now()
	if l.cfg.Store != nil {
		if addr, email, ok := l.shared(a, now); ok {
			return l.judge(a, addr, email, now)
		}
	}
	return l.judge(a, l.addresses.generations(a.addr, now), l.emails.generations(a.email, now), now)
}

// shared reads the failures of the attempt's address and email in the store, whose
// generations are its windows: the current one and the one before. ok is false when the
// store failed.
func (l *Limiter) shared(a *Attempt, now time.Time) (addr, email generations, ok bool) {
	started := now.Truncate(l.cfg.Window)
	ctx, cancel := context.WithTimeout(a.ctx, storeTimeout)
	defer cancel()
	counts, err := l.cfg.Store.Failures(ctx, started.Add(-l.cfg.Window), a.keys()...)
	if !l.answered(opCheck, err) {
		return addr, email, false
	}
	addr, email = generations{started: started}, generations{started: started}
	for _, c := range counts {
		g := &addr
		if c.Key != a.addr {
			g = &email
		}
		// A window after the current one is a replica's whose clock is ahead: current.
		if c.Window.Before(started) {
			g.prev += c.Failures
		} else {
			g.cur += c.Failures
		}
	}
	return addr, email, true
}

// judge refuses the attempt when its address or email (if any) has reached its limit.
func (l *Limiter) judge(a *Attempt, addr, email generations, now time.Time) *Refusal {
	if left := addr.blocked(l.cfg.PerAddress, l.cfg.Window, now); left > 0 {
		return l.refuse(ReasonAddress, left)
	}
	if a.email == 0 {
		return nil
	}
	if left := email.blocked(l.cfg.PerEmail, l.cfg.Window, now); left > 0 {
		return l.refuse(ReasonEmail, left)
	}
	return nil
}

// answered reports whether a statement of the store succeeded; a failure is counted, and
// logged when it starts an outage, as is the first answer after one.
func (l *Limiter) answered(op string, err error) bool {
	if err != nil {
		l.storeErrors.WithLabelValues(op).Inc()
		if !l.storeDown.Swap(true) {
			l.cfg.Logger.Warn("login limits: the shared failure counts failed; counting this replica's alone until they answer", "op", op, "err", err)
		}
		return false
	}
	if l.storeDown.Swap(false) {
		l.cfg.Logger.Info("login limits: the shared failure counts answer again")
	}
	return true
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

// Failed records a wrong password (or a login that cannot be anyone's) against the address
// and the email, and frees the hash slot.
func (a *Attempt) Failed() {
	l, now := a.l, a.l.cfg.Now()
	l.addresses.fail(a.addr, now)
	if a.email != 0 {
		l.emails.fail(a.email, now)
	}
	// Recorded before the hash slot is freed, so that the login waiting for it sees this
	// failure on its second look.
	if l.cfg.Store != nil {
		ctx, cancel := context.WithTimeout(a.ctx, storeTimeout)
		defer cancel()
		started := now.Truncate(l.cfg.Window)
		l.answered(opFail, l.cfg.Store.Fail(ctx, started, started.Add(-l.cfg.Window), a.keys()...))
	}
	<-l.hashes
}

// Succeeded forgets the email's failures and frees the hash slot. The address keeps its
// failures: an account of one's own must not reset the count of guesses at others'.
func (a *Attempt) Succeeded() {
	l := a.l
	if a.email != 0 {
		l.emails.forget(a.email)
		if l.cfg.Store != nil {
			ctx, cancel := context.WithTimeout(a.ctx, storeTimeout)
			defer cancel()
			l.answered(opForget, l.cfg.Store.Forget(ctx, a.email))
		}
	}
	<-l.hashes
}

// keys are the attempt's address and its email, if any.
func (a *Attempt) keys() []Key {
	if a.email == 0 {
		return []Key{a.addr}
	}
	return []Key{a.addr, a.email}
}

// Done frees the hash slot of a login that ended before its password was judged (the
// database failed, say), counting nothing.
func (a *Attempt) Done() { <-a.l.hashes }

// generations are a key's failures in the current generation, begun at started, and in the
// one before.
type generations struct {
	cur, prev int
	started   time.Time
}

// blocked returns how long a key with these failures stays blocked at limit, or 0.
func (g generations) blocked(limit int, window time.Duration, now time.Time) time.Duration {
	if g.cur+g.prev < limit {
		return 0
	}
	// The failures in prev go at the next turn, those in cur at the one after.
	if g.cur < limit {
		return max(g.started.Add(window).Sub(now), time.Second)
	}
	return max(g.started.Add(2*window).Sub(now), time.Second)
}

// table counts failures per key in two generations: cur since started, prev the window
// before. A key's failures are cur's plus prev's.
type table struct {
	mu        sync.Mutex
	entries   int
	window    time.Duration
	started   time.Time
	cur, prev map[Key]uint32
}

func newTable(entries int, window time.Duration, now time.Time) *table {
	return &table{entries: max(entries, 1), window: window, started: now, cur: map[Key]uint32{}, prev: map[Key]uint32{}}
}

// turn retires generations older than the window. t.mu is held.
func (t *table) turn(now time.Time) {
	if now.Sub(t.started) < t.window {
		return
	}
	if now.Sub(t.started) >= 2*t.window {
		t.prev = map[Key]uint32{}
	} else {
		t.prev = t.cur
	}
	t.cur, t.started = map[Key]uint32{}, now
}

// generations returns the key's failures.
func (t *table) generations(k Key, now time.Time) generations {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.turn(now)
	return generations{cur: int(t.cur[k]), prev: int(t.prev[k]), started: t.started}
}

func (t *table) fail(k Key, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.turn(now)
	if _, ok := t.cur[k]; !ok && len(t.cur) >= t.entries {
		// Full: retire the generation early. The oldest failures are forgotten, never the
		// count of a new key refused.
		t.prev, t.cur, t.started = t.cur, map[Key]uint32{}, now
	}
	if t.cur[k] < ^uint32(0) {
		t.cur[k]++
	}
}

func (t *table) forget(k Key) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.cur, k)
	delete(t.prev, k)
}

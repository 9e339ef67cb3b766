// Package webhook delivers a project's changes to the webhooks subscribed to them: the
// dispatcher that every control-plane replica runs over the outbox in PostgreSQL (claimed
// with leases, so each attempt is made once across replicas, and a few at a time per hook, so
// a slow receiver delays only its own hook), the signed POST of each delivery, retries with
// backoff for 24 hours, and the address policy that keeps hooks off private networks (checked
// when a hook is saved and again on the address each delivery dials).
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/internal/backoff"
)

// Renderer renders what events carry as the REST API shows it (controlplane/httpapi's
// WebhookObjects): the body a receiver gets holds the same objects as the API's answers.
type Renderer interface {
	Flag(f *controlplane.Flag) any
	Annotation(a *controlplane.Annotation) any
	ScheduledChange(c *controlplane.ScheduledChange) any
	User(u *controlplane.User) any
}

// Config holds the dispatcher's settings; zero fields take the defaults of DefaultConfig.
type Config struct {
	// Concurrency is how many deliveries this replica attempts at once.
	Concurrency int
	// PerHook is how many deliveries of one hook are attempted at once, by every replica
	// together (the outbox counts the leases in PostgreSQL): a slow or dead receiver holds at
	// most this many slots, and the other hooks' deliveries take the rest. Below Concurrency,
	// a hook's backlog never fills a replica.
	PerHook int
	// Timeout bounds one attempt: connecting, sending, and reading the answer's head.
	Timeout time.Duration
	// RetryBase is the first retry's delay; each further one doubles, up to RetryMax, with
	// jitter (internal/backoff).
	RetryBase, RetryMax time.Duration
	// GiveUpAfter is how long after its event a delivery is still retried.
	GiveUpAfter time.Duration
	// Poll is the longest the dispatcher sleeps without a notification: a safety net for
	// a lost NOTIFY.
	Poll time.Duration
	// UserAgent is sent with every delivery.
	UserAgent string
}

// DefaultConfig returns the production settings.
func DefaultConfig() Config {
	return Config{Concurrency: 8, PerHook: 2, Timeout: 10 * time.Second, RetryBase: 10 * time.Second, RetryMax: time.Hour,
		GiveUpAfter: 24 * time.Hour, Poll: 30 * time.Second, UserAgent: "flagedge-webhooks"}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Concurrency <= 0 {
		c.Concurrency = d.Concurrency
	}
	if c.PerHook <= 0 {
		c.PerHook = d.PerHook
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.RetryBase <= 0 {
		c.RetryBase = d.RetryBase
	}
	if c.RetryMax <= 0 {
		c.RetryMax = max(d.RetryMax, c.RetryBase)
	}
	if c.GiveUpAfter <= 0 {
		c.GiveUpAfter = d.GiveUpAfter
	}
	if c.Poll <= 0 {
		c.Poll = d.Poll
	}
	if c.UserAgent == "" {
		c.UserAgent = d.UserAgent
	}
	return c
}

// ResponsePrefixBytes is how much of a receiver's answer is read and kept in the log.
const ResponsePrefixBytes = 256

// Dispatcher attempts the due deliveries of the outbox. Every replica runs one: a delivery
// claimed by one is leased to it, so the others skip it.
type Dispatcher struct {
	outbox  controlplane.SystemWebhookOutbox
	render  Renderer
	cfg     Config
	log     *slog.Logger
	client  *http.Client
	wake    chan struct{}
	freed   chan struct{}
	metrics *metrics
}

type metrics struct {
	outcomes *prometheus.CounterVec
	lag      prometheus.Histogram
}

// New returns a dispatcher over outbox, the system's unchecked access to every project's
// deliveries (it acts for no user), that dials only what policy allows. reg, when not
// nil, gets its metrics: attempts by outcome, the outbox's depth, and the time from an event
// to its delivery.
func New(outbox controlplane.SystemWebhookOutbox, render Renderer, policy *Policy, cfg Config, log *slog.Logger, reg prometheus.Registerer) *Dispatcher {
	cfg = cfg.withDefaults()
	dialer := &net.Dialer{Timeout: cfg.Timeout, Control: policy.Control}
	transport := &http.Transport{
		Proxy:                  nil, // a proxy would dial for us, past the address check
		DialContext:            dialer.DialContext,
		TLSHandshakeTimeout:    cfg.Timeout,
		ResponseHeaderTimeout:  cfg.Timeout,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        30 * time.Second,
		MaxResponseHeaderBytes: 16 << 10,
	}
	d := &Dispatcher{
		outbox: outbox, render: render, cfg: cfg, log: log,
		client: &http.Client{Transport: transport, Timeout: cfg.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		wake:  make(chan struct{}, 1),
		freed: make(chan struct{}, 1),
		metrics: &metrics{
			outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_controlplane_webhook_deliveries_total",
				Help: "Webhook delivery attempts by outcome: delivered (2xx), retry (to be attempted again), failed (given up: a permanent refusal or 24 h of failures)."},
				[]string{"outcome"}),
			lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flagedge_controlplane_webhook_delivery_lag_seconds",
				Help:    "Time from a webhook event's write to its successful delivery (retries included).",
				Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}),
		},
	}
	if reg != nil {
		depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_controlplane_webhook_outbox_depth",
			Help: "Webhook deliveries pending in the outbox (all replicas): not yet delivered nor given up."},
			func() float64 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				n, err := outbox.Depth(ctx)
				if err != nil {
					return -1
				}
				return float64(n)
			})
		reg.MustRegister(d.metrics.outcomes, d.metrics.lag, depth)
	}
	for _, o := range []string{"delivered", "retry", "failed"} {
		d.metrics.outcomes.WithLabelValues(o)
	}
	return d
}

// Wake makes the dispatcher look for due deliveries now: called on every NOTIFY of the
// webhook channel, and when the LISTEN connection comes back.
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run attempts due deliveries until ctx ends, at most Concurrency at once and at most PerHook
// of one hook across replicas, then waits for the attempts under way.
func (d *Dispatcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var inflight atomic.Int64
	for ctx.Err() == nil {
		free := d.cfg.Concurrency - int(inflight.Load())
		if free > 0 {
			list, err := d.outbox.Claim(ctx, free, d.cfg.PerHook, d.cfg.Timeout+5*time.Second)
			if err != nil && ctx.Err() == nil {
				d.log.Warn("claim webhook deliveries", "err", err)
			}
			for _, p := range list {
				inflight.Add(1)
				wg.Go(func() {
					d.attempt(ctx, p)
					inflight.Add(-1)
					select {
					case d.freed <- struct{}{}:
					default:
					}
				})
			}
			if len(list) == free {
				continue // there may be more due: claim again as soon as a slot is free
			}
		}
		wait := d.cfg.Poll
		if free > 0 {
			if next, err := d.outbox.NextDue(ctx, d.cfg.PerHook); err == nil && !next.IsZero() {
				wait = min(wait, max(time.Until(next), 10*time.Millisecond))
			}
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-d.wake:
		case <-d.freed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// body is what a receiver gets.
type body struct {
	DeliveryID      string          `json:"delivery_id"`
	EventID         string          `json:"event_id"`
	Event           string          `json:"event"`
	Timestamp       string          `json:"timestamp"`
	ProjectID       int64           `json:"project_id"`
	SnapshotVersion int64           `json:"snapshot_version"`
	Actor           any             `json:"actor"`
	Data            json.RawMessage `json:"data"`
}

// Body renders the delivery's body: the same bytes on every attempt.
func (d *Dispatcher) Body(p *controlplane.PendingDelivery) ([]byte, error) {
	data := p.Object
	var v any
	switch p.ObjectType {
	case controlplane.ObjectFlag:
		var f controlplane.Flag
		if err := json.Unmarshal(p.Object, &f); err != nil {
			return nil, err
		}
		v = d.render.Flag(&f)
	case controlplane.ObjectAnnotation:
		var a controlplane.Annotation
		if err := json.Unmarshal(p.Object, &a); err != nil {
			return nil, err
		}
		v = d.render.Annotation(&a)
	case controlplane.ObjectScheduledChange:
		var c controlplane.ScheduledChange
		if err := json.Unmarshal(p.Object, &c); err != nil {
			return nil, err
		}
		v = d.render.ScheduledChange(&c)
	}
	if v != nil {
		var err error
		if data, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	var actor any
	if p.Actor != nil {
		actor = d.render.User(p.Actor)
	}
	return json.Marshal(body{DeliveryID: p.ID, EventID: p.EventID, Event: p.Kind,
		Timestamp: p.CreatedAt.UTC().Format(controlplane.TimeLayout), ProjectID: p.ProjectID,
		SnapshotVersion: p.SnapshotVersion, Actor: actor, Data: data})
}

// attempt makes one attempt and records its outcome.
func (d *Dispatcher) attempt(ctx context.Context, p *controlplane.PendingDelivery) {
	res := d.send(ctx, p)
	now := time.Now()
	switch {
	case res.Status == controlplane.DeliveryDelivered:
		d.metrics.lag.Observe(now.Sub(p.CreatedAt).Seconds())
	case res.Status == controlplane.DeliveryPending:
		next := now.Add(d.retryDelay(p.Attempts + 1))
		if next.Sub(p.CreatedAt) > d.cfg.GiveUpAfter {
			res.Status = controlplane.DeliveryFailed
			res.Error = "gave up " + d.cfg.GiveUpAfter.String() + " after the event: " + res.Error
		} else {
			res.NextAttemptAt = next
		}
	}
	outcome := map[string]string{controlplane.DeliveryDelivered: "delivered", controlplane.DeliveryPending: "retry",
		controlplane.DeliveryFailed: "failed"}[res.Status]
	d.metrics.outcomes.WithLabelValues(outcome).Inc()
	if res.Status != controlplane.DeliveryDelivered {
		d.log.Info("webhook delivery not made", "delivery", p.ID, "webhook", p.WebhookID, "event", p.Kind,
			"attempt", p.Attempts+1, "outcome", outcome, "err", res.Error)
	}
	// Record the outcome even when ctx ended: the attempt was made.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := d.outbox.Finish(fctx, p.ID, res); err != nil {
		d.log.Warn("record webhook delivery", "delivery", p.ID, "err", err)
	}
}

// retryDelay is the delay before attempt n+1 after n failed ones: RetryBase doubled n-1
// times, capped at RetryMax, drawn from [d/2, 3d/2).
func (d *Dispatcher) retryDelay(n int) time.Duration {
	b := backoff.Backoff{Initial: d.cfg.RetryBase, Max: d.cfg.RetryMax}
	for range min(n-1, 40) {
		b.Next()
	}
	return b.Next()
}

// send POSTs the delivery once and classifies the answer: 2xx delivered; 408, 429, 5xx and
// network errors retried; a redirect, any other status, and a refused address are
// permanent failures.
func (d *Dispatcher) send(ctx context.Context, p *controlplane.PendingDelivery) controlplane.DeliveryResult {
	payload, err := d.Body(p)
	if err != nil {
		return controlplane.DeliveryResult{Status: controlplane.DeliveryFailed, Error: "render body: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, bytes.NewReader(payload))
	if err != nil {
		return controlplane.DeliveryResult{Status: controlplane.DeliveryFailed, Error: "bad URL: " + err.Error()}
	}
	now := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.cfg.UserAgent)
	req.Header.Set(HeaderEvent, p.Kind)
	req.Header.Set(HeaderEventID, p.EventID)
	req.Header.Set(HeaderDelivery, p.ID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(p.Secret, now, payload))
	resp, err := d.client.Do(req)
	if err != nil {
		if errors.Is(err, errRefused) {
			return controlplane.DeliveryResult{Status: controlplane.DeliveryFailed, Error: cleanError(err)}
		}
		return controlplane.DeliveryResult{Status: controlplane.DeliveryPending, Error: cleanError(err)}
	}
	prefix, _ := io.ReadAll(io.LimitReader(resp.Body, ResponsePrefixBytes))
	resp.Body.Close()
	code := resp.StatusCode
	res := controlplane.DeliveryResult{StatusCode: &code, ResponsePrefix: validPrefix(prefix)}
	switch {
	case code >= 200 && code < 300:
		res.Status = controlplane.DeliveryDelivered
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		res.Status, res.Error = controlplane.DeliveryPending, "HTTP "+strconv.Itoa(code)
	case code >= 300 && code < 400:
		res.Status, res.Error = controlplane.DeliveryFailed, fmt.Sprintf("HTTP %d: redirects are not followed (Location: %s)",
			code, truncate(resp.Header.Get("Location"), 200))
	default:
		res.Status, res.Error = controlplane.DeliveryFailed, "HTTP "+strconv.Itoa(code)+": refused for good"
	}
	return res
}

// cleanError is err's text for the log, without the request's method and URL (which can
// hold a token in its query string) that url.Error adds.
func cleanError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return truncate(err.Error(), 500)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// validPrefix is the answer's prefix as text PostgreSQL stores: invalid UTF-8 (a cut rune,
// binary) and NUL become U+FFFD.
func validPrefix(b []byte) string {
	return strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "\uFFFD")
}

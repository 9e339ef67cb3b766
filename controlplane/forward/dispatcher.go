// Package forward sends a project's events to its event destinations in PostHog's capture
// shape: the dispatcher every control-plane replica runs over the queue in PostgreSQL (a
// destination is leased to one dispatcher at a time, so each batch is sent once across
// replicas and in order), the gzip POST to the destination's /batch/, and what each answer
// means: delivered, split (413), bisected down to the events refused (400, kept as dead
// letters), retried with backoff honouring Retry-After (429, 503, other 5xx, network
// errors), or the destination paused until it is changed (its key refused).
package forward

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
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/internal/backoff"
)

// Config holds the dispatcher's settings; zero fields take the defaults of DefaultConfig.
type Config struct {
	// Workers is how many destinations this replica sends to at once (each one batch at a
	// time).
	Workers int
	// BatchSize is the most events one batch holds.
	BatchSize int
	// MaxBatchBytes bounds a batch's events' properties, before compression: PostHog takes
	// at most 20 MB per /batch/ request; a 413 splits the batch anyway.
	MaxBatchBytes int
	// Timeout bounds one request: connecting, sending, and reading the answer.
	Timeout time.Duration
	// RetryBase is the first retry's delay; each further one doubles, up to RetryMax, with
	// jitter (internal/backoff). A longer Retry-After is honoured, up to RetryMax.
	RetryBase, RetryMax time.Duration
	// Poll is how often an idle worker looks for queued events.
	Poll time.Duration
	// UserAgent is sent with every request.
	UserAgent string
}

// DefaultConfig returns the production settings.
func DefaultConfig() Config {
	return Config{Workers: 4, BatchSize: 1000, MaxBatchBytes: 8 << 20, Timeout: 30 * time.Second,
		RetryBase: time.Second, RetryMax: 5 * time.Minute, Poll: time.Second, UserAgent: "flagedge-forward"}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
	if c.BatchSize <= 0 {
		c.BatchSize = d.BatchSize
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = d.MaxBatchBytes
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
	if c.Poll <= 0 {
		c.Poll = d.Poll
	}
	if c.UserAgent == "" {
		c.UserAgent = d.UserAgent
	}
	return c
}

// requestsPerClaim bounds the requests one claim makes (the splits and bisections of one
// batch), so that one destination's bad batch does not hold a worker for long; what is left
// is claimed again at once.
const requestsPerClaim = 32

// Dispatcher sends the queued events of every destination. Every replica runs one.
type Dispatcher struct {
	queue   controlplane.SystemForwardQueue
	cfg     Config
	log     *slog.Logger
	client  *http.Client
	metrics *metrics
}

type metrics struct {
	events  *prometheus.CounterVec
	batches *prometheus.CounterVec
}

// AddressPolicy decides which addresses destinations may reach (controlplane/webhook's
// Policy, the one decision for webhooks and destinations, with its own switch): CheckURL when
// a destination is saved, Control on the address each request dials.
type AddressPolicy interface {
	CheckURL(ctx context.Context, raw string) error
	Control(network, address string, c syscall.RawConn) error
}

// New returns a dispatcher over queue, the system's unchecked access to every project's queued
// events (it acts for no user), that dials only what policy allows. reg, when not nil, gets
// its metrics: events and requests by outcome, and each destination's queue and lag.
func New(queue controlplane.SystemForwardQueue, policy AddressPolicy, cfg Config, log *slog.Logger, reg prometheus.Registerer) *Dispatcher {
	cfg = cfg.withDefaults()
	dialer := &net.Dialer{Timeout: cfg.Timeout, Control: func(network, address string, c syscall.RawConn) error {
		if err := policy.Control(network, address, c); err != nil {
			return fmt.Errorf("%w: %w", errRefused, err)
		}
		return nil
	}}
	transport := &http.Transport{
		Proxy:                  nil, // a proxy would dial for us, past the address check
		DialContext:            dialer.DialContext,
		TLSHandshakeTimeout:    cfg.Timeout,
		ResponseHeaderTimeout:  cfg.Timeout,
		MaxIdleConnsPerHost:    cfg.Workers,
		IdleConnTimeout:        30 * time.Second,
		MaxResponseHeaderBytes: 16 << 10,
	}
	d := &Dispatcher{
		queue: queue, cfg: cfg, log: log,
		client: &http.Client{Transport: transport, Timeout: cfg.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		metrics: &metrics{
			events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_controlplane_forward_events_total",
				Help: "Events forwarded to event destinations by outcome: sent (accepted by the destination), retried (in a batch to be sent again), dead_lettered (refused alone, kept for an operator)."},
				[]string{"outcome"}),
			batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_controlplane_forward_batches_total",
				Help: "Requests to event destinations' /batch/ by outcome: sent (2xx), split (413: halved), bisected (400: halved to find the events refused), dead_lettered (one event refused), retry (429, 503, 408, other 5xx, network error), paused (401, 403, or another refusal that needs the destination changed)."},
				[]string{"outcome"}),
		},
	}
	for _, o := range []string{"sent", "retried", "dead_lettered"} {
		d.metrics.events.WithLabelValues(o)
	}
	for _, o := range []string{"sent", "split", "bisected", "dead_lettered", "retry", "paused"} {
		d.metrics.batches.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(d.metrics.events, d.metrics.batches, backlogCollector{queue: queue, log: log})
	}
	return d
}

// backlogCollector reads each destination's queue when metrics are scraped.
type backlogCollector struct {
	queue controlplane.SystemForwardQueue
	log   *slog.Logger
}

var (
	lagDesc = prometheus.NewDesc("flagedge_controlplane_forward_lag_seconds",
		"Age of the oldest event queued for an event destination (all replicas): how far forwarding is behind.", []string{"destination"}, nil)
	queuedDesc = prometheus.NewDesc("flagedge_controlplane_forward_queued_events",
		"Events queued for an event destination, not yet sent nor dead-lettered (all replicas).", []string{"destination"}, nil)
)

func (c backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- lagDesc; ch <- queuedDesc }

func (c backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	list, err := c.queue.Backlog(ctx)
	if err != nil {
		c.log.Warn("read the forwarding backlog for metrics", "err", err)
		return
	}
	for _, b := range list {
		id := strconv.FormatInt(b.DestinationID, 10)
		ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, b.OldestAge.Seconds(), id)
		ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(b.Events), id)
	}
}

// Run sends queued events until ctx ends, with Workers workers, then waits for the batches
// under way (their outcome is recorded).
func (d *Dispatcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range d.cfg.Workers {
		wg.Go(func() { d.work(ctx) })
	}
	wg.Wait()
}

// lease is how long a claim holds its destination before its next request: one request's
// timeout and a margin. Each further request of the claim renews it, so a replica that dies
// mid-batch holds its destination no longer than this.
func (d *Dispatcher) lease() time.Duration { return d.cfg.Timeout + 10*time.Second }

// work claims and sends batches; idle, it waits until the queue's next due destination or
// Poll, whichever is sooner.
func (d *Dispatcher) work(ctx context.Context) {
	for ctx.Err() == nil {
		b, err := d.queue.Claim(ctx, d.cfg.BatchSize, d.lease())
		if err != nil && ctx.Err() == nil {
			d.log.Warn("claim forward batch", "err", err)
		}
		if b != nil {
			o := d.Deliver(ctx, b)
			// Record the outcome even when ctx ended: the requests were made.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if err := d.queue.Finish(fctx, b, o); err != nil {
				d.log.Warn("record forward batch", "destination", b.DestinationID, "err", err)
			}
			cancel()
			continue
		}
		wait := d.cfg.Poll
		if next, err := d.queue.NextDue(ctx); err == nil && !next.IsZero() {
			wait = min(wait, max(time.Until(next), 10*time.Millisecond))
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// delivery is one claim's progress: the outcome so far and the requests left.
type delivery struct {
	b        *controlplane.ForwardBatch
	out      controlplane.ForwardOutcome
	requests int
}

// Deliver sends the batch's events, as many as fit MaxBatchBytes, splitting and bisecting as
// the destination's answers ask, and returns what became of them. It stops at the first
// answer that is not about the batch's content (retry, pause) or after requestsPerClaim
// requests; the events not done stay queued.
func (d *Dispatcher) Deliver(ctx context.Context, b *controlplane.ForwardBatch) controlplane.ForwardOutcome {
	events, size := b.Events, 0
	for i, e := range events {
		if size += len(e.Properties) + len(e.Name) + len(e.DistinctID) + 100; size > d.cfg.MaxBatchBytes && i > 0 {
			events = events[:i]
			break
		}
	}
	dl := &delivery{b: b, requests: requestsPerClaim}
	d.send(ctx, dl, events)
	return dl.out
}

// event is one event as PostHog's /batch/ takes it.
type event struct {
	Event      string          `json:"event"`
	DistinctID string          `json:"distinct_id"`
	Properties json.RawMessage `json:"properties"`
	Timestamp  string          `json:"timestamp"`
	UUID       string          `json:"uuid"`
}

func newEvent(e *controlplane.ForwardEvent) event {
	return event{Event: e.Name, DistinctID: e.DistinctID, Properties: e.Properties,
		Timestamp: e.Timestamp.UTC().Format(controlplane.TimeLayout), UUID: e.UUID}
}

// Body renders a /batch/ request's body, gzipped: one key, the events, when it was sent.
func Body(apiKey string, events []*controlplane.ForwardEvent, sentAt time.Time) ([]byte, error) {
	batch := make([]event, len(events))
	for i, e := range events {
		batch[i] = newEvent(e)
	}
	raw, err := json.Marshal(struct {
		APIKey string  `json:"api_key"`
		Batch  []event `json:"batch"`
		SentAt string  `json:"sent_at"`
	}{apiKey, batch, sentAt.UTC().Format(controlplane.TimeLayout)})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// BatchURL is the /batch/ endpoint of a destination's URL (a PostHog capture host, with or
// without a path prefix).
func BatchURL(raw string) string { return strings.TrimRight(raw, "/") + "/batch/" }

// send sends events and, on a refusal of their content, their halves; it reports false when
// it stopped (dl.out says why) before every event was done.
func (d *Dispatcher) send(ctx context.Context, dl *delivery, events []*controlplane.ForwardEvent) bool {
	if dl.requests == 0 {
		return false
	}
	if dl.requests < requestsPerClaim { // the claim's lease covered its first request only
		held, err := d.queue.Extend(ctx, dl.b, d.lease())
		if err != nil || !held {
			if err != nil {
				d.log.Warn("extend forward lease", "destination", dl.b.DestinationID, "err", err)
			}
			return false
		}
	}
	dl.requests--
	code, answer, retryAfter, err := d.post(ctx, dl.b, events)
	switch {
	case err == nil && code >= 200 && code < 300:
		dl.done(events)
		d.metrics.batches.WithLabelValues("sent").Inc()
		d.metrics.events.WithLabelValues("sent").Add(float64(len(events)))
		return true
	case err == nil && (code == http.StatusBadRequest || code == http.StatusRequestEntityTooLarge):
		if len(events) == 1 {
			d.deadLetter(dl, events[0], code, answer)
			return true
		}
		d.metrics.batches.WithLabelValues(map[int]string{http.StatusBadRequest: "bisected", http.StatusRequestEntityTooLarge: "split"}[code]).Inc()
		mid := len(events) / 2
		return d.send(ctx, dl, events[:mid]) && d.send(ctx, dl, events[mid:])
	case err != nil && errors.Is(err, errRender):
		dl.out.Error = err.Error()
		dl.out.RetryAt = time.Now().Add(d.cfg.RetryMax)
	case err != nil && !errors.Is(err, errRefused) || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		why := "HTTP " + strconv.Itoa(code)
		if err != nil {
			why = cleanError(err)
		}
		delay := d.retryDelay(dl.b.Attempts + 1)
		if retryAfter > delay {
			delay = min(retryAfter, d.cfg.RetryMax)
		}
		dl.out.Error, dl.out.RetryAt = why, time.Now().Add(delay)
		d.metrics.batches.WithLabelValues("retry").Inc()
		d.metrics.events.WithLabelValues("retried").Add(float64(len(events)))
		d.log.Info("forward batch to be retried", "destination", dl.b.DestinationID, "events", len(events), "err", why, "in", delay)
	default: // a refused address, a key refused (401, 403), a wrong URL (404, 405, a redirect): the destination must be changed
		why := "HTTP " + strconv.Itoa(code) + ": " + answer
		if err != nil {
			why = cleanError(err)
		}
		dl.out.Error, dl.out.Pause = why, why
		d.metrics.batches.WithLabelValues("paused").Inc()
		d.log.Warn("event destination paused until it is changed", "destination", dl.b.DestinationID, "project", dl.b.ProjectID, "err", why)
	}
	return false
}

func (dl *delivery) done(events []*controlplane.ForwardEvent) {
	for _, e := range events {
		dl.out.Done = append(dl.out.Done, e.Seq)
	}
}

func (d *Dispatcher) deadLetter(dl *delivery, e *controlplane.ForwardEvent, code int, answer string) {
	raw, err := json.Marshal(newEvent(e))
	if err != nil { // properties come from jsonb: always valid JSON
		raw = []byte(`{}`)
	}
	dl.out.Done = append(dl.out.Done, e.Seq)
	dl.out.DeadLetters = append(dl.out.DeadLetters, controlplane.ForwardDeadLetter{UUID: e.UUID, Event: raw, StatusCode: code,
		Error: "HTTP " + strconv.Itoa(code) + ": " + answer})
	d.metrics.batches.WithLabelValues("dead_lettered").Inc()
	d.metrics.events.WithLabelValues("dead_lettered").Inc()
	d.log.Warn("event refused by its destination, dead-lettered", "destination", dl.b.DestinationID, "uuid", e.UUID, "status", code, "answer", answer)
}

var (
	errRender  = errors.New("render batch")
	errRefused = errors.New("address refused")
)

// answerBytes is how much of an answer is read and kept (a dead letter's error).
const answerBytes = 512

// post makes one request: its status, the start of its answer and the Retry-After it asks.
func (d *Dispatcher) post(ctx context.Context, b *controlplane.ForwardBatch, events []*controlplane.ForwardEvent) (int, string, time.Duration, error) {
	body, err := Body(b.APIKey, events, time.Now())
	if err != nil {
		return 0, "", 0, fmt.Errorf("%w: %w", errRender, err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, BatchURL(b.URL), bytes.NewReader(body))
	if err != nil {
		return 0, "", 0, fmt.Errorf("%w: bad URL: %w", errRefused, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("User-Agent", d.cfg.UserAgent)
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, "", 0, err
	}
	defer resp.Body.Close()
	prefix, _ := io.ReadAll(io.LimitReader(resp.Body, answerBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // so the connection is reused
	return resp.StatusCode, validText(prefix), retryAfter(resp.Header.Get("Retry-After")), nil
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// retryDelay is the delay after n failed attempts: RetryBase doubled n-1 times, capped at
// RetryMax, with jitter.
func (d *Dispatcher) retryDelay(n int) time.Duration {
	b := backoff.Backoff{Initial: d.cfg.RetryBase, Max: d.cfg.RetryMax}
	for range min(n-1, 40) {
		b.Next()
	}
	return b.Next()
}

// cleanError is err's text without the request's method and URL that url.Error adds.
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

// validText is an answer's start as text PostgreSQL stores: invalid UTF-8 and NUL become
// U+FFFD.
func validText(b []byte) string {
	return strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "\uFFFD")
}

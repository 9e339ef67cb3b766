package ofrep

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/jsonenc"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/clientip"
)

// InactivityDelaySec is the inactivityDelaySec announced with the stream: a page hidden for
// two minutes closes its stream and re-fetches when shown again (ADR 0008's default).
const InactivityDelaySec = 120

// StreamPath is the path of the change stream.
const StreamPath = "/ofrep/v1/stream"

// retryMillis is the reconnection delay the stream suggests to EventSource: soon enough that a
// page misses little while an edge restarts, long enough that the reconnections of thousands
// of pages are spread out.
const retryMillis = 2000

// StreamConfig bounds the change streams of one edge.
type StreamConfig struct {
	// Key signs the stream credentials. Edges behind one address need the same key, since a
	// page may be told the stream by one edge and connect to another.
	Key []byte
	// MaxStreams and MaxPerAddr bound the open streams of the edge and of one client address;
	// a stream over either is refused with 429.
	MaxStreams, MaxPerAddr int
	// Heartbeat is how often an idle stream gets a comment line, so that proxies keep it and a
	// gone client is noticed.
	Heartbeat time.Duration
	// WriteTimeout bounds one write to a stream; a client that does not take a few hundred
	// bytes in that time is gone, and its stream is closed rather than waited for.
	WriteTimeout time.Duration
	// CredentialTTL is how long a stream URL is valid. URLs are issued per half of it, so the
	// URL (and with it the bulk answer's ETag) stays the same for that long.
	CredentialTTL time.Duration
}

// DefaultStreamConfig returns the configuration the edge starts with, less the key.
func DefaultStreamConfig() StreamConfig {
	return StreamConfig{MaxStreams: 50_000, MaxPerAddr: 100, Heartbeat: 15 * time.Second,
		WriteTimeout: 500 * time.Millisecond, CredentialTTL: time.Hour}
}

// Hub keeps the open change streams by project and writes a refetchEvaluation event to each
// of a project's streams when its snapshot changes. A stream holds no queue: every event is
// one shared message, written with a deadline, so a stream's memory is its connection.
type Hub struct {
	cfg   StreamConfig
	state *state.Holder
	ips   *clientip.Resolver
	log   *slog.Logger
	now   func() time.Time

	mu        sync.Mutex // guards the fields below
	byProject map[int64]map[*stream]struct{}
	notified  map[int64]int64 // per project with streams: the version its streams were told
	perAddr   map[netip.Addr]int
	total     int // streams admitted by their connection's run, until it leaves
	closed    bool

	refused *prometheus.CounterVec
	events  prometheus.Counter
}

type stream struct {
	mu   sync.Mutex // serialises writes
	conn net.Conn
}

// NewHub returns the hub of an edge's change streams; Run keeps them informed.
func NewHub(cfg StreamConfig, h *state.Holder, ips *clientip.Resolver, log *slog.Logger, reg prometheus.Registerer) *Hub {
	hub := &Hub{cfg: cfg, state: h, ips: ips, log: log, now: time.Now,
		byProject: map[int64]map[*stream]struct{}{}, notified: map[int64]int64{}, perAddr: map[netip.Addr]int{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_edge_ofrep_streams_refused_total",
			Help: "OFREP change streams refused, by reason (limit_total, limit_address)."}, []string{"reason"}),
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "flagedge_edge_ofrep_stream_events_total",
			Help: "refetchEvaluation events written to OFREP change streams."}),
	}
	if reg != nil {
		reg.MustRegister(hub.refused, hub.events, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flagedge_edge_ofrep_streams",
			Help: "OFREP change streams open."}, func() float64 {
			hub.mu.Lock()
			defer hub.mu.Unlock()
			return float64(hub.total)
		}))
	}
	return hub
}

// URL returns the stream URL for project p, on the scheme and host the request came to, or
// "" when the Host header is not a plain host name.
func (h *Hub) URL(ctx *fasthttp.RequestCtx, p *state.Project) string {
	host := string(ctx.Host())
	if host == "" || strings.IndexFunc(host, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-:[]", r))
	}) >= 0 {
		return ""
	}
	scheme := "http://"
	if ctx.IsTLS() || bytes.EqualFold(ctx.Request.Header.Peek("X-Forwarded-Proto"), []byte("https")) {
		scheme = "https://"
	}
	return scheme + host + StreamPath + "?c=" + h.credential(p)
}

// credential signs the project's id, an expiry and its token (so a new token ends the old
// URLs). The expiry is the end of the current half-TTL window plus half the TTL.
func (h *Hub) credential(p *state.Project) string {
	half := h.cfg.CredentialTTL / 2
	exp := h.now().Truncate(half).Add(h.cfg.CredentialTTL).Unix()
	msg := strconv.FormatInt(p.ID, 10) + "." + strconv.FormatInt(exp, 10)
	return msg + "." + h.mac(msg, p.Token)
}

func (h *Hub) mac(msg, token string) string {
	m := hmac.New(sha256.New, h.cfg.Key)
	m.Write([]byte(msg))
	m.Write([]byte{0})
	m.Write([]byte(token))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// verify returns the project a credential is valid for, or nil.
func (h *Hub) verify(cred string) *state.Project {
	if len(cred) > 128 {
		return nil
	}
	parts := strings.Split(cred, ".")
	if len(parts) != 3 {
		return nil
	}
	id, err1 := strconv.ParseInt(parts[0], 10, 64)
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || h.now().Unix() >= exp {
		return nil
	}
	p := h.state.ByID(id)
	if p == nil || !hmac.Equal([]byte(parts[2]), []byte(h.mac(parts[0]+"."+parts[1], p.Token))) {
		return nil
	}
	return p
}

var errBadCredential = &Error{Status: http.StatusUnauthorized, Code: codeGeneral,
	Details: "The stream URL is invalid or has expired: evaluate the flags again for a new one."}

// Serve answers GET /ofrep/v1/stream?c=<credential>: a text/event-stream that says
// refetchEvaluation, with the new configuration ETag and the snapshot version as the event
// id, whenever the project's snapshot changes, and a comment line every heartbeat. A
// reconnecting client whose Last-Event-ID is not the current version is told at once.
//
// A stream over a limit is refused here, by the server's answer; an admitted one is counted
// only by the handler of the hijacked connection (run), which gives its place back whatever
// happens to the connection. fasthttp does not call that handler when the connection fails
// before it is handed over (flushing the answer to a request pipelined ahead fails on a
// connection reset meanwhile): a stream counted here would then hold its place for good.
func (h *Hub) Serve(ctx *fasthttp.RequestCtx) error {
	p := h.verify(string(ctx.QueryArgs().Peek("c")))
	if p == nil {
		return errBadCredential
	}
	addr := h.ips.ClientIP(ctx.Request.Header.PeekAll("X-Forwarded-For"), ctx.RemoteIP())
	if err := h.check(addr); err != nil {
		return err
	}
	head := make([]byte, 0, 512)
	head = append(head, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\nConnection: close\r\n"...)
	var cors [][2]string
	for _, name := range []string{"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials", "Vary"} {
		if v := ctx.Response.Header.Peek(name); len(v) > 0 {
			head = append(append(append(append(head, name...), ": "...), v...), "\r\n"...)
			cors = append(cors, [2]string{name, string(v)})
		}
	}
	head = append(head, "\r\nretry: "...)
	head = strconv.AppendInt(head, retryMillis, 10)
	head = append(head, '\n')
	if last := ctx.Request.Header.Peek("Last-Event-ID"); len(last) > 0 && string(last) != strconv.FormatInt(p.Version, 10) {
		head = append(head, refetchEvent(p)...)
	} else {
		head = append(head, "id: "...)
		head = strconv.AppendInt(head, p.Version, 10)
		head = append(head, "\n\n"...)
	}
	o := &opening{projectID: p.ID, version: p.Version, addr: addr, head: head, cors: cors}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) { h.run(c, o) })
	return nil
}

// opening is what the handler of a stream's hijacked connection needs of its request.
type opening struct {
	projectID, version int64
	addr               netip.Addr
	head               []byte      // the response head and the stream's first lines
	cors               [][2]string // the CORS headers of the answer, for a refusal
}

// refetchEvent is the refetchEvaluation event of a project version.
func refetchEvent(p *state.Project) []byte {
	b := make([]byte, 0, 128)
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, p.Version, 10)
	b = append(b, "\ndata: {\"type\":\"refetchEvaluation\",\"etag\":"...)
	b = jsonenc.AppendString(b, `"`+strconv.FormatInt(p.ID, 10)+"-"+strconv.FormatInt(p.Version, 10)+`"`)
	b = append(b, `,"lastModified":`...)
	b = strconv.AppendInt(b, p.BuiltAt.Unix(), 10)
	return append(b, "}\n\n"...)
}

// check returns the refusal of a new stream from addr, counted in the refusal metric, or
// nil when the limits let it open now. It counts no stream: admit does, once the stream's
// connection is its own.
func (h *Hub) check(addr netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refusalLocked(addr)
}

// admit counts a new stream from addr against the limits, or returns its refusal; whoever
// it admits must leave.
func (h *Hub) admit(addr netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.refusalLocked(addr); err != nil {
		return err
	}
	h.total++
	h.perAddr[addr]++
	return nil
}

// refusalLocked is check with h.mu held.
func (h *Hub) refusalLocked(addr netip.Addr) error {
	switch {
	case h.closed:
		return errNotReady
	case h.total >= h.cfg.MaxStreams:
		h.refused.WithLabelValues("limit_total").Inc()
		return &Error{Status: http.StatusTooManyRequests, Code: codeGeneral, Details: "This edge has as many change streams open as it serves.", RetryAfter: 30}
	case h.perAddr[addr] >= h.cfg.MaxPerAddr:
		h.refused.WithLabelValues("limit_address").Inc()
		return &Error{Status: http.StatusTooManyRequests, Code: codeGeneral, Details: "Too many change streams from this address.", RetryAfter: 30}
	}
	return nil
}

// run serves one hijacked connection: it takes the stream's place (or answers its refusal,
// when streams that passed check with it took the last one), joins the project's streams,
// writes the response head, then waits for the client to go (reading what it sends, which
// is nothing), and leaves.
func (h *Hub) run(c net.Conn, o *opening) {
	raw := c
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		raw = u.UnsafeConn() // the hijacked wrapper's Close does nothing
	}
	defer raw.Close()
	if err := h.admit(o.addr); err != nil {
		h.refuse(raw, o.cors, err)
		return
	}
	st := &stream{conn: raw}
	st.mu.Lock()
	joined := h.join(st, o.projectID, o.version)
	defer h.leave(st, o.projectID, o.addr, joined)
	err := st.writeLocked(o.head, h.cfg.WriteTimeout)
	// A change announced between the request and the join did not reach this stream: the
	// version read now is at least any the hub announced.
	if p := h.state.ByID(o.projectID); err == nil && p != nil && p.Version != o.version {
		err = st.writeLocked(refetchEvent(p), h.cfg.WriteTimeout)
	}
	st.mu.Unlock()
	if joined && err == nil {
		var buf [64]byte
		for read := 0; read < 4096; {
			n, err := c.Read(buf[:])
			if err != nil {
				break
			}
			read += n
		}
	}
}

// refuse answers err on a hijacked connection as WriteError answers it on the server's
// path, with the request's CORS headers and Connection: close (the caller closes).
func (h *Hub) refuse(c net.Conn, cors [][2]string, err error) {
	var rc fasthttp.RequestCtx
	for _, kv := range cors {
		rc.Response.Header.Set(kv[0], kv[1])
	}
	WriteError(&rc, h.log, err)
	rc.Response.SetConnectionClose()
	if c.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout)) == nil {
		rc.Response.WriteTo(c) //nolint:errcheck // the connection is closed next either way
	}
}

func (h *Hub) join(st *stream, projectID, version int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	streams := h.byProject[projectID]
	if streams == nil {
		streams = map[*stream]struct{}{}
		h.byProject[projectID] = streams
		h.notified[projectID] = version
	}
	streams[st] = struct{}{}
	return true
}

func (h *Hub) leave(st *stream, projectID int64, addr netip.Addr, joined bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if joined {
		streams := h.byProject[projectID]
		delete(streams, st)
		if len(streams) == 0 {
			delete(h.byProject, projectID)
			delete(h.notified, projectID)
		}
	}
	h.total--
	if h.perAddr[addr]--; h.perAddr[addr] <= 0 {
		delete(h.perAddr, addr)
	}
}

func (st *stream) writeLocked(b []byte, timeout time.Duration) error {
	if err := st.conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	_, err := st.conn.Write(b)
	return err
}

// write writes b, or closes the stream when it cannot take it in time.
func (st *stream) write(b []byte, timeout time.Duration) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.writeLocked(b, timeout); err != nil {
		st.conn.Close() // its run sees the read fail and leaves
		return false
	}
	return true
}

// Run writes the events of snapshot changes and the heartbeats until ctx ends, then closes
// every stream.
func (h *Hub) Run(ctx context.Context) {
	tick := time.NewTicker(h.cfg.Heartbeat)
	defer tick.Stop()
	for {
		changed := h.state.Changed() // before announcing, so no change falls between
		h.announce()
		select {
		case <-ctx.Done():
			h.Close()
			return
		case <-changed:
		case <-tick.C:
			h.mu.Lock()
			var all []*stream
			for _, streams := range h.byProject {
				all = slices.AppendSeq(all, maps.Keys(streams))
			}
			h.mu.Unlock()
			h.send(all, []byte(":\n\n"))
		}
	}
}

// announce writes a refetchEvaluation event to the streams of every project whose version
// differs from the one they were told, and closes the streams of projects no longer held.
func (h *Hub) announce() {
	type job struct {
		msg     []byte
		streams []*stream
	}
	var jobs []job
	var gone []*stream
	h.mu.Lock()
	for id, streams := range h.byProject {
		p := h.state.ByID(id)
		switch {
		case p == nil:
			gone = slices.AppendSeq(gone, maps.Keys(streams))
		case p.Version != h.notified[id]:
			h.notified[id] = p.Version
			jobs = append(jobs, job{msg: refetchEvent(p), streams: slices.Collect(maps.Keys(streams))})
		}
	}
	h.mu.Unlock()
	for _, st := range gone {
		st.conn.Close()
	}
	for _, j := range jobs {
		h.events.Add(float64(h.send(j.streams, j.msg)))
	}
}

// send writes msg to the streams, a few hundred per goroutine so that ten thousand streams
// take milliseconds, and returns how many took it.
func (h *Hub) send(streams []*stream, msg []byte) int {
	const perWorker = 256
	var wg sync.WaitGroup
	var mu sync.Mutex // guards ok
	ok := 0
	for start := 0; start < len(streams); start += perWorker {
		part := streams[start:min(start+perWorker, len(streams))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for _, st := range part {
				if st.write(msg, h.cfg.WriteTimeout) {
					n++
				}
			}
			mu.Lock()
			ok += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return ok
}

// Close closes every stream and refuses new ones; the clients reconnect, to another edge
// when this one is going away. It is safe to call more than once.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	var all []*stream
	for _, streams := range h.byProject {
		all = slices.AppendSeq(all, maps.Keys(streams))
	}
	h.mu.Unlock()
	for _, st := range all {
		st.conn.Close()
	}
}

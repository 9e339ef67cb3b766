package httpapi

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/admit"
	"github.com/flagedge/flagedge/edge/capture"
	"github.com/flagedge/flagedge/edge/reqbody"
)

// ConnConfig bounds what a client's connections may hold (docs/operations.md, "Hostile
// traffic").
type ConnConfig struct {
	// HeaderTimeout bounds the time to send a request's line and headers, from the
	// connection's opening or the request's first byte: a client that sends them slowly
	// (slowloris) is closed then.
	HeaderTimeout time.Duration
	// BodyTimeout bounds the time to send a body once the headers are in; capture batches
	// may be 20 MB from a slow mobile link.
	BodyTimeout time.Duration
	// WriteTimeout bounds the time to write an answer.
	WriteTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive connection.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers (with a GET's ?data=): larger ones
	// are answered 431.
	MaxHeaderBytes int
	// MaxConnsPerAddr bounds the connections open at once from one peer address (the
	// socket's: behind a proxy, the proxy's); 0 for none.
	MaxConnsPerAddr int
}

// NewFastHTTPServer returns the fasthttp server that serves s within c. Request bodies are
// streamed (reqbody reads them within the in-flight budget), so fasthttp holds at most 8 KiB
// of a body before a handler has admitted it.
func (s *Server) NewFastHTTPServer(c ConnConfig, log *slog.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler: s.Handler(), ErrorHandler: s.ServeError, Name: "flagedge-edge",
		ReadTimeout: c.HeaderTimeout, WriteTimeout: c.WriteTimeout, IdleTimeout: c.IdleTimeout,
		// A body fasthttp reads with the headers is in by the header timeout; a larger one
		// gets the body timeout from there (not set for small ones: it costs a timer update).
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			if n := h.ContentLength(); n >= 0 && n <= reqbody.Prefetched {
				return fasthttp.RequestConfig{}
			}
			return fasthttp.RequestConfig{ReadTimeout: c.BodyTimeout}
		},
		ReadBufferSize: c.MaxHeaderBytes,
		// An answer and its headers leave in one write up to 32 KiB (1,000 flags answer in
		// 27 KiB): with the 4 KiB default a large answer took two system calls. Writers
		// are pooled and held only while a response is written.
		WriteBufferSize:       32 << 10,
		StreamRequestBody:     true,
		MaxRequestBodySize:    capture.MaxBodyBytes, // bodies are streamed: checked by reqbody.Read
		NoDefaultServerHeader: true,
		Logger:                slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// Listen wraps ln with what the edge does to every connection: it bounds the connections
// of one peer address to max (closing more as they are accepted, counted as refusals; max <=
// 0: no bound), and lets a handler that refuses a body unread ask for a lingering close.
func Listen(ln net.Listener, max int, refusals *admit.Refusals) net.Listener {
	return &listener{Listener: ln, max: max, refusals: refusals, open: map[netip.Addr]int{}}
}

type listener struct {
	net.Listener
	max      int
	refusals *admit.Refusals
	mu       sync.Mutex         // guards open
	open     map[netip.Addr]int // connections open by peer address; no entry at 0
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.max <= 0 {
			return &conn{Conn: c}, nil
		}
		addr := peerAddr(c)
		l.mu.Lock()
		n := l.open[addr]
		if n < l.max {
			l.open[addr] = n + 1
		}
		l.mu.Unlock()
		if n >= l.max {
			l.refusals.Count(admit.ConnsPerAddr)
			c.Close()
			continue
		}
		return &conn{Conn: c, l: l, addr: addr}, nil
	}
}

func (l *listener) release(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[addr] <= 1 {
		delete(l.open, addr)
		return
	}
	l.open[addr]--
}

func peerAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		addr, _ := netip.AddrFromSlice(a.IP)
		return addr.Unmap()
	}
	return netip.Addr{}
}

// Lingering bounds the lingering close of a connection whose request body was refused
// unread: long enough for the client to read the answer before the rest of its body meets
// a reset, short enough that it holds little.
const (
	lingerTime  = time.Second
	lingerBytes = 4 << 20
)

// conn gives its place back once, when closed, lingers when asked to, and applies its
// deadlines lazily (see deadline).
type conn struct {
	net.Conn
	l               *listener // nil when not counted
	addr            netip.Addr
	linger          atomic.Bool
	once            sync.Once
	reading, writes deadline
}

// deadlineSlack is how much later than asked a deadline may fire: fasthttp sets a read
// deadline twice and a write deadline once for every request of a kept-alive connection,
// and each one given to the socket costs a runtime timer update; rounded up to this, the
// deadlines of a busy connection stay where they are for many requests.
const deadlineSlack = 50 * time.Millisecond

// deadline is one direction's deadline as asked (rounded up to deadlineSlack, in Unix
// nanoseconds, 0 for none) and as given to the socket, which happens before the next Read
// (or Write), only when it moved. A deadline asked while a Read blocks applies to the next
// one; the edge's server asks for its deadlines between its own reads and writes. Between
// a request's headers and its handler, fasthttp moves the read deadline from the idle timeout
// to the header timeout without reading again: that one is never given to the socket.
type deadline struct {
	want, applied atomic.Int64
}

func (d *deadline) set(t time.Time) {
	var n int64
	if !t.IsZero() {
		n = t.UnixNano()
		if r := n % int64(deadlineSlack); r != 0 {
			n += int64(deadlineSlack) - r
		}
		if n == 0 {
			n = int64(deadlineSlack) // the epoch itself: still a deadline, not none
		}
	}
	d.want.Store(n)
}

// moved returns the deadline to give the socket, when it moved since last given (then
// given reports it done).
func (d *deadline) moved() (t time.Time, n int64, ok bool) {
	n = d.want.Load()
	if n == d.applied.Load() {
		return time.Time{}, 0, false
	}
	if n != 0 {
		t = time.Unix(0, n)
	}
	return t, n, true
}

func (d *deadline) given(n int64) { d.applied.Store(n) }

func (c *conn) SetReadDeadline(t time.Time) error {
	c.reading.set(t)
	return nil
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.writes.set(t)
	return nil
}

func (c *conn) SetDeadline(t time.Time) error {
	c.reading.set(t)
	c.writes.set(t)
	return nil
}

func (c *conn) Read(p []byte) (int, error) {
	if t, n, ok := c.reading.moved(); ok {
		if err := c.Conn.SetReadDeadline(t); err != nil {
			return 0, err
		}
		c.reading.given(n)
	}
	return c.Conn.Read(p)
}

func (c *conn) Write(p []byte) (int, error) {
	if t, n, ok := c.writes.moved(); ok {
		if err := c.Conn.SetWriteDeadline(t); err != nil {
			return 0, err
		}
		c.writes.given(n)
	}
	return c.Conn.Write(p)
}

// LingerOnClose makes Close send the answer's end first (a TCP half-close) and read and drop
// what the client still sends for a while: closed with a body unread, the socket would reset
// the connection and the client could lose the answer (a 413) it was sent.
func (c *conn) LingerOnClose() { c.linger.Store(true) }

func (c *conn) Close() error {
	c.once.Do(func() {
		if c.l != nil {
			c.l.release(c.addr)
		}
		if tcp, ok := c.Conn.(*net.TCPConn); ok && c.linger.Load() {
			if tcp.CloseWrite() == nil {
				tcp.SetReadDeadline(time.Now().Add(lingerTime))
				io.CopyN(io.Discard, tcp, lingerBytes)
			}
		}
	})
	return c.Conn.Close()
}

package httpapi

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
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
		ReadBufferSize:        c.MaxHeaderBytes,
		StreamRequestBody:     true,
		MaxRequestBodySize:    capture.MaxBodyBytes, // bodies are streamed: checked by reqbody.Read
		NoDefaultServerHeader: true,
		Logger:                slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// LimitConns wraps ln so that a peer address holding max connections has further ones
// closed as they are accepted, counted as refusals; max <= 0 returns ln as it is.
func LimitConns(ln net.Listener, max int, refusals *admit.Refusals) net.Listener {
	if max <= 0 {
		return ln
	}
	return &connLimiter{Listener: ln, max: max, refusals: refusals, open: map[netip.Addr]int{}}
}

type connLimiter struct {
	net.Listener
	max      int
	refusals *admit.Refusals
	mu       sync.Mutex         // guards open
	open     map[netip.Addr]int // connections open by peer address; no entry at 0
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
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
		return &limitedConn{Conn: c, l: l, addr: addr}, nil
	}
}

func (l *connLimiter) release(addr netip.Addr) {
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

// limitedConn gives its place back once, when closed.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	addr netip.Addr
	once sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() { c.l.release(c.addr) })
	return c.Conn.Close()
}

package main

import (
	"net"

	"github.com/valyala/fasthttp"
)

// baseline is a bare fasthttp server answering every request with a fixed body of the size
// of a /decide answer: the ceiling the same client reaches on this machine.
type baseline struct {
	ln  net.Listener
	srv *fasthttp.Server
}

func startBaseline(bodySize int) (*baseline, error) { return listenBaseline("127.0.0.1:0", bodySize) }

// listenBaseline starts a baseline on addr; the pinned scenario runs one in a process of
// its own (bench --serve-bare).
func listenBaseline(addr string, bodySize int) (*baseline, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	body := make([]byte, bodySize)
	for i := range body {
		body[i] = 'x'
	}
	b := &baseline{ln: ln, srv: &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}}}
	go b.srv.Serve(ln) //nolint:errcheck // ends when the listener closes
	return b, nil
}

func (b *baseline) addr() string { return b.ln.Addr().String() }

func (b *baseline) close() { _ = b.srv.Shutdown() }

package httpapi

import (
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/admit"
	"github.com/flagedge/flagedge/edge/apierror"
	"github.com/flagedge/flagedge/edge/jsonenc"
)

// writeError answers with the API's error body for err: an *apierror.Error as it says, any
// other error as a 500 whose cause goes to the log, never to the caller.
func (s *Server) writeError(ctx *fasthttp.RequestCtx, err error) {
	var e *apierror.Error
	if !errors.As(err, &e) {
		s.cfg.Logger.Error("internal error", "path", string(ctx.Path()), "err", err)
		e = apierror.Internal
	}
	b := make([]byte, 0, 128+len(e.Detail))
	b = append(b, `{"type":`...)
	b = jsonenc.AppendString(b, e.Type)
	b = append(b, `,"code":`...)
	b = jsonenc.AppendString(b, e.Code)
	b = append(b, `,"detail":`...)
	b = jsonenc.AppendString(b, e.Detail)
	b = append(b, `,"attr":`...)
	if e.Attr != "" {
		b = jsonenc.AppendString(b, e.Attr)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, '}')
	ctx.Response.ResetBody()
	if e.RetryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(e.RetryAfterSeconds()))
	}
	writeJSON(ctx, e.Status, b)
	s.countRefusal(e.Status, e)
}

// countRefusal counts an answer of status for err among the refusals, by reason, when it is
// one: a body over a limit, the in-flight budget spent, the spool full. Routes of another
// API's shape (OFREP) count theirs here too.
func (s *Server) countRefusal(status int, err error) {
	switch {
	case status == fasthttp.StatusRequestEntityTooLarge:
		s.cfg.Refusals.Count(admit.Oversize)
	case errors.Is(err, apierror.Busy):
		s.cfg.Refusals.Count(admit.InflightBudget)
	case errors.Is(err, apierror.CaptureUnavailable):
		s.cfg.Refusals.Count(admit.SpoolFull)
	}
}

// errBodyTooLarge answers bodies over the server's limit, refused before they are read.
var errBodyTooLarge = apierror.TooLarge("The request body is over 20 MB.")

// ServeError answers a request fasthttp could not read (it is the server's ErrorHandler): an
// oversized body gets 413 and anything else malformed 400, in the API's error shape and with
// CORS headers, so that browsers and SDKs see the same errors as from handlers. fasthttp
// closes the connection afterwards.
func (s *Server) ServeError(ctx *fasthttp.RequestCtx, err error) {
	setCORS(ctx)
	start := time.Now()
	defer s.unreadable.observe(ctx, start)
	var netErr net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		s.writeError(ctx, errBodyTooLarge)
	case errors.As(err, &netErr) && netErr.Timeout():
		s.writeError(ctx, apierror.RequestTimeout)
	default:
		s.writeError(ctx, apierror.Malformed("the request could not be read."))
	}
}

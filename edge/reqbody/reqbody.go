// Package reqbody reads the body of an SDK's request at the edge within bounded memory, and
// decodes it in whichever encoding the SDK chose (JSON, gzip, lz-string, base64, a form's
// data=), as said by the query string and the headers. /decide and capture read their bodies
// through it.
//
// The edge's server streams request bodies (fasthttp's StreamRequestBody): fasthttp reads at
// most its first 8 KiB before the handler runs, and Read reads the rest only after checking
// the declared length against the endpoint's limit and reserving the bytes from the
// process-wide Budget. Decoding reserves what decompression takes in the same lease, and
// the handlers reserve the cost of parsing, so the memory all requests in flight hold is
// bounded by the budget, whatever they send.
package reqbody

import (
	"errors"
	"io"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/apierror"
	"github.com/flagedge/flagedge/shared/event"
)

// Prefetched is how much of a streamed body fasthttp has read before the handler runs
// (fixed in fasthttp): bodies up to this size are in memory already and are not reserved.
const Prefetched = 8 << 10

// readChunk is how much of a body of unknown length (chunked) is reserved and read at a time.
const readChunk = 64 << 10

// ErrUnreadable reports a body that could not be read to its end (the client stopped
// sending, or sent less than it declared).
var ErrUnreadable = errors.New("the request body could not be read")

// Read returns the raw body of ctx's request, refusing one over limit bytes with
// event.ErrTooLarge — before reading it when its length is declared. A body not yet in
// memory is read into memory reserved in lease first (ErrBusy when the budget stays spent).
// After a refusal the connection is closed: the rest of the body is never read.
func Read(ctx *fasthttp.RequestCtx, limit int, lease *Lease) ([]byte, error) {
	declared := ctx.Request.Header.ContentLength()
	stream := ctx.RequestBodyStream()
	if stream == nil || (declared >= 0 && declared <= Prefetched) {
		body := ctx.PostBody() // in memory already
		if len(body) > limit {
			return nil, event.ErrTooLarge
		}
		return body, nil
	}
	if declared > limit {
		refuseUnread(ctx)
		return nil, event.ErrTooLarge
	}
	if declared >= 0 {
		if err := lease.Reserve(declared); err != nil {
			refuseUnread(ctx)
			return nil, err
		}
		body := make([]byte, declared)
		if _, err := io.ReadFull(stream, body); err != nil {
			ctx.SetConnectionClose()
			return nil, ErrUnreadable
		}
		ctx.Request.CloseBodyStream() //nolint:errcheck // read to its end: Finish keeps the connection
		return body, nil
	}
	// Chunked: reserve and read a chunk at a time, up to the limit.
	var body []byte
	for {
		if len(body) == cap(body) {
			grow := min(max(cap(body), readChunk), limit+1-cap(body))
			if grow <= 0 {
				refuseUnread(ctx)
				return nil, event.ErrTooLarge
			}
			if err := lease.Reserve(grow); err != nil {
				refuseUnread(ctx)
				return nil, err
			}
			body = append(make([]byte, 0, cap(body)+grow), body...)
		}
		n, err := stream.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if len(body) > limit {
			refuseUnread(ctx)
			return nil, event.ErrTooLarge
		}
		if err == io.EOF {
			ctx.Request.CloseBodyStream() //nolint:errcheck // read to its end: Finish keeps the connection
			return body, nil
		}
		if err != nil {
			ctx.SetConnectionClose()
			return nil, ErrUnreadable
		}
	}
}

// refuseUnread closes ctx's connection after the answer, the rest of the body unread,
// lingering where the connection can (see httpapi's listener) so the client reads the
// answer.
func refuseUnread(ctx *fasthttp.RequestCtx) {
	ctx.SetConnectionClose()
	if c, ok := ctx.Conn().(interface{ LingerOnClose() }); ok {
		c.LingerOnClose()
	}
}

// Decode decodes raw, the body of ctx's request (or its ?data=), to at most max bytes; it
// returns event.ErrTooLarge beyond, ErrBusy when the memory decompressing takes cannot be
// reserved in lease, and an error saying what is wrong with a body that does not decode.
func Decode(ctx *fasthttp.RequestCtx, raw []byte, max int, lease *Lease) ([]byte, error) {
	req := event.Request{
		Body:            raw,
		Compression:     view(ctx.QueryArgs().Peek("compression")),
		ContentType:     view(ctx.Request.Header.ContentType()),
		ContentEncoding: view(ctx.Request.Header.ContentEncoding()),
	}
	if lease.b != nil && !plainJSON(raw) { // plain JSON is decoded in place: nothing to reserve
		req.Reserve = lease.Reserve
	}
	return event.Decode(req, max)
}

// AsAPIError is the answer to a body that could not be read, decoded or admitted; tooLarge
// is the endpoint's answer to a body over its size limit.
func AsAPIError(err error, tooLarge error) error {
	var limit *event.LimitError
	switch {
	case errors.Is(err, event.ErrTooLarge):
		return tooLarge
	case errors.As(err, &limit):
		return apierror.TooLarge("The request is over a limit: " + limit.Error() + ".")
	case errors.Is(err, ErrBusy):
		return apierror.Busy
	case errors.Is(err, ErrUnreadable):
		return apierror.Malformed("the request body could not be read.")
	}
	return apierror.Malformed(err.Error())
}

// Finish makes ctx's connection safe to reuse after its handler ran: a streamed body that
// Read did not read to its end would be taken for the next request, so the connection is
// closed instead. It never waits for the client.
func Finish(ctx *fasthttp.RequestCtx) {
	if ctx.RequestBodyStream() == nil {
		return // read whole, or none
	}
	if declared := ctx.Request.Header.ContentLength(); declared >= 0 && declared <= Prefetched {
		return // fasthttp read all of it with the headers
	}
	refuseUnread(ctx)
}

// plainJSON reports whether b starts as a JSON object or array does.
func plainJSON(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{', '[':
			return true
		}
		return false
	}
	return false
}

// view sees b as a string without copying: the strings live only while Decode runs.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

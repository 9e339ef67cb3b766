// Package reqbody reads the body of an SDK's request at the edge in whichever encoding the
// SDK chose (JSON, gzip, lz-string, base64, a form's data=), as said by the query string and
// the headers. /decide and capture read their bodies through it.
package reqbody

import (
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/shared/event"
)

// Decode decodes raw, the body of ctx's request (or its ?data=), to at most max bytes; it
// returns event.ErrTooLarge beyond, and an error saying what is wrong with a body that does
// not decode.
func Decode(ctx *fasthttp.RequestCtx, raw []byte, max int) ([]byte, error) {
	return event.Decode(event.Request{
		Body:            raw,
		Compression:     view(ctx.QueryArgs().Peek("compression")),
		ContentType:     view(ctx.Request.Header.ContentType()),
		ContentEncoding: view(ctx.Request.Header.ContentEncoding()),
	}, max)
}

// view sees b as a string without copying: the strings live only while Decode runs.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

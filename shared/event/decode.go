// Package event holds what capture and decide share about request bodies: decoding every
// encoding PostHog's SDKs send (JSON, gzip, lz-string base64, base64, form data=) into JSON,
// parsing capture bodies into events, making text and numbers storable (CleanJSON,
// CleanString) and the server-side time of an event (EventTime).
package event

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/klauspost/compress/gzip"
)

// ErrTooLarge reports a body that is, or decompresses to, more than the allowed size.
var ErrTooLarge = errors.New("request body too large")

// InvalidPayloadError reports a body that cannot be decoded.
type InvalidPayloadError struct{ Reason string }

func (e *InvalidPayloadError) Error() string { return "invalid payload: " + e.Reason }

func invalid(format string, args ...any) error {
	return &InvalidPayloadError{Reason: fmt.Sprintf(format, args...)}
}

// Request describes a body as it arrived.
type Request struct {
	Body []byte
	// Compression is the compression query parameter: gzip, gzip-js, lz64, base64 or empty.
	Compression     string
	ContentType     string
	ContentEncoding string
	// Reserve, when set, is asked before decoding takes memory the body does not already
	// hold (a form's fields, decompressed or base64-decoded output), n bytes at a time; an
	// error stops the decoding and is returned as it is. It lets the caller keep a budget of
	// the memory all requests hold, so that a small compressed body cannot take much.
	Reserve func(n int) error
}

func (req *Request) reserve(n int) error {
	if req.Reserve == nil {
		return nil
	}
	return req.Reserve(n)
}

// Decode returns the JSON document a request carries, undoing form encoding, gzip (by
// parameter, header or magic bytes), lz-string base64 and plain base64. The decoded document
// may be at most maxSize bytes.
func Decode(req Request, maxSize int) ([]byte, error) {
	body, compression := req.Body, strings.ToLower(req.Compression)
	// A form body carries the payload in data=; clients such as curl label plain JSON as a
	// form too, and that is read as the JSON it is.
	if hasPrefixFold(req.ContentType, "application/x-www-form-urlencoded") && !looksLikeJSON(body) {
		if err := req.reserve(3 * len(body)); err != nil { // the text, the parsed fields, data=
			return nil, err
		}
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, invalid("malformed form body")
		}
		if c := form.Get("compression"); c != "" {
			compression = strings.ToLower(c)
		}
		body = []byte(form.Get("data"))
	}
	if len(body) > maxSize {
		return nil, ErrTooLarge
	}
	var err error
	switch {
	case compression == "lz64" || compression == "lz-string":
		if body, err = decompressLZ64(strings.TrimSpace(string(body)), maxSize, req.Reserve); err != nil {
			if errors.Is(err, ErrLZString) {
				return nil, invalid("cannot decompress lz64 data")
			}
			return nil, err
		}
	case compression == "gzip" || compression == "gzip-js" || strings.EqualFold(req.ContentEncoding, "gzip") || isGzip(body):
		if body, err = gunzip(body, maxSize, &req); err != nil {
			return nil, err
		}
	}
	if looksLikeJSON(body) {
		return body, nil
	}
	// posthog-js sends base64 (in form data= and with compression=base64); "+" may have
	// become a space on the way.
	if err := req.reserve(2 * len(body)); err != nil { // "+" restored, then decoded
		return nil, err
	}
	decoded, err := decodeBase64(bytes.TrimSpace(bytes.ReplaceAll(body, []byte(" "), []byte("+"))))
	if err != nil {
		return nil, invalid("body is neither JSON nor base64")
	}
	if isGzip(decoded) {
		if decoded, err = gunzip(decoded, maxSize, &req); err != nil {
			return nil, err
		}
	}
	if !looksLikeJSON(decoded) {
		return nil, invalid("body is not JSON")
	}
	return decoded, nil
}

func isGzip(b []byte) bool { return len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b }

// hasPrefixFold reports whether s begins with prefix, ignoring case, without lower-casing s
// (every request's Content-Type goes through it).
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func looksLikeJSON(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

// gunzipChunk is how much more output gunzip reserves at a time.
const gunzipChunk = 256 << 10

// gunzip decompresses b into at most maxSize bytes, reserving its output as it grows: a
// gzip bomb stops at maxSize, or earlier when the budget is spent.
func gunzip(b []byte, maxSize int, req *Request) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, invalid("cannot decompress gzip data")
	}
	defer zr.Close()
	var out []byte
	for {
		if len(out) == cap(out) {
			grow := min(max(cap(out), gunzipChunk), maxSize+1-cap(out))
			if grow <= 0 {
				return nil, ErrTooLarge
			}
			if err := req.reserve(grow); err != nil {
				return nil, err
			}
			out = append(make([]byte, 0, cap(out)+grow), out...)
		}
		n, err := zr.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if len(out) > maxSize {
			return nil, ErrTooLarge
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, invalid("cannot decompress gzip data")
		}
	}
}

// decodeBase64 decodes b in whichever of the base64 alphabets, padded or not, it is written.
func decodeBase64(b []byte) ([]byte, error) {
	out := make([]byte, base64.RawStdEncoding.DecodedLen(len(b))) // the largest of the four
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if n, err := enc.Decode(out, b); err == nil {
			return out[:n], nil
		}
	}
	return nil, errors.New("not base64")
}

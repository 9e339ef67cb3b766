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
}

// Decode returns the JSON document a request carries, undoing form encoding, gzip (by
// parameter, header or magic bytes), lz-string base64 and plain base64. The decoded document
// may be at most maxSize bytes.
func Decode(req Request, maxSize int) ([]byte, error) {
	body, compression := req.Body, strings.ToLower(req.Compression)
	// A form body carries the payload in data=; clients such as curl label plain JSON as a
	// form too, and that is read as the JSON it is.
	if strings.HasPrefix(strings.ToLower(req.ContentType), "application/x-www-form-urlencoded") && !looksLikeJSON(body) {
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
		if body, err = DecompressLZ64(strings.TrimSpace(string(body)), maxSize); err != nil {
			if errors.Is(err, ErrTooLarge) {
				return nil, err
			}
			return nil, invalid("cannot decompress lz64 data")
		}
	case compression == "gzip" || compression == "gzip-js" || strings.EqualFold(req.ContentEncoding, "gzip") || isGzip(body):
		if body, err = gunzip(body, maxSize); err != nil {
			return nil, err
		}
	}
	if looksLikeJSON(body) {
		return body, nil
	}
	// posthog-js sends base64 (in form data= and with compression=base64); "+" may have
	// become a space on the way.
	decoded, err := decodeBase64(bytes.TrimSpace(bytes.ReplaceAll(body, []byte(" "), []byte("+"))))
	if err != nil {
		return nil, invalid("body is neither JSON nor base64")
	}
	if isGzip(decoded) {
		if decoded, err = gunzip(decoded, maxSize); err != nil {
			return nil, err
		}
	}
	if !looksLikeJSON(decoded) {
		return nil, invalid("body is not JSON")
	}
	return decoded, nil
}

func isGzip(b []byte) bool { return len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b }

func looksLikeJSON(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

func gunzip(b []byte, maxSize int) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, invalid("cannot decompress gzip data")
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, int64(maxSize)+1))
	if err != nil {
		return nil, invalid("cannot decompress gzip data")
	}
	if len(out) > maxSize {
		return nil, ErrTooLarge
	}
	return out, nil
}

func decodeBase64(b []byte) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		out := make([]byte, enc.DecodedLen(len(b)))
		if n, err := enc.Decode(out, b); err == nil {
			return out[:n], nil
		}
	}
	return nil, errors.New("not base64")
}

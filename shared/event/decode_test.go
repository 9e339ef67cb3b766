package event_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/flagedge/flagedge/shared/event"
)

type lzFixture struct {
	Plain string `json:"plain"`
	LZ64  string `json:"lz64"`
}

// The fixtures were made with the npm package lz-string 1.5.0 (compressToBase64), the
// library posthog-js compresses with.
func loadFixtures(t testing.TB) []lzFixture {
	data, err := os.ReadFile("testdata/lzstring_fixtures.json")
	if err != nil {
		t.Fatal(err)
	}
	var out []lzFixture
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDecompressLZ64(t *testing.T) {
	for _, f := range loadFixtures(t) {
		got, err := event.DecompressLZ64(f.LZ64, 1<<20)
		if err != nil {
			t.Errorf("%q: %v", f.LZ64, err)
			continue
		}
		if string(got) != f.Plain {
			t.Errorf("decompress %q:\n got %q\nwant %q", f.LZ64, got, f.Plain)
		}
	}
	for _, bad := range []string{"", "!!!!", "AAAA", "N4IghgDglg+g1gUwJ4g"} {
		if _, err := event.DecompressLZ64(bad, 1<<20); err == nil {
			t.Errorf("%q decompressed", bad)
		}
	}
	long := loadFixtures(t)[6]
	if _, err := event.DecompressLZ64(long.LZ64, 100); !errors.Is(err, event.ErrTooLarge) {
		t.Errorf("output over the bound: %v", err)
	}
}

func gz(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func TestDecode(t *testing.T) {
	doc := []byte(`{"api_key":"phc_x","distinct_id":"d"}`)
	lz := loadFixtures(t)[3]
	b64 := base64.StdEncoding.EncodeToString(doc)
	for _, tc := range []struct {
		name string
		req  event.Request
		want string
	}{
		{"json", event.Request{Body: doc}, string(doc)},
		{"gzip param", event.Request{Body: gz(t, doc), Compression: "gzip"}, string(doc)},
		{"gzip-js param", event.Request{Body: gz(t, doc), Compression: "gzip-js"}, string(doc)},
		{"gzip header", event.Request{Body: gz(t, doc), ContentEncoding: "gzip"}, string(doc)},
		{"gzip magic", event.Request{Body: gz(t, doc)}, string(doc)},
		{"lz64", event.Request{Body: []byte(lz.LZ64), Compression: "lz64"}, lz.Plain},
		{"base64", event.Request{Body: []byte(b64), Compression: "base64"}, string(doc)},
		{"base64 without param", event.Request{Body: []byte(b64)}, string(doc)},
		{"form data", event.Request{Body: []byte("data=" + url.QueryEscape(b64)), ContentType: "application/x-www-form-urlencoded"}, string(doc)},
		{"form data with + turned to space", event.Request{Body: []byte("data=" + strings.ReplaceAll(base64.StdEncoding.EncodeToString([]byte(`{"a":"~~~>>>"}`)), "+", "%20")),
			ContentType: "application/x-www-form-urlencoded"}, `{"a":"~~~>>>"}`},
		{"form lz64", event.Request{Body: []byte("compression=lz64&data=" + url.QueryEscape(lz.LZ64)), ContentType: "application/x-www-form-urlencoded; charset=utf-8"}, lz.Plain},
		{"JSON labelled as a form", event.Request{Body: doc, ContentType: "application/x-www-form-urlencoded"}, string(doc)},
		{"base64 of gzip", event.Request{Body: []byte(base64.StdEncoding.EncodeToString(gz(t, doc)))}, string(doc)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := event.Decode(tc.req, 1<<20)
			if err != nil || string(got) != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		req  event.Request
	}{
		{"garbage", event.Request{Body: []byte("not json at all %%%")}},
		{"bad gzip", event.Request{Body: []byte("\x1f\x8bnope"), Compression: "gzip"}},
		{"bad lz64", event.Request{Body: []byte("@@@"), Compression: "lz64"}},
		{"empty", event.Request{}},
		{"base64 of text", event.Request{Body: []byte(base64.StdEncoding.EncodeToString([]byte("hello")))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ip *event.InvalidPayloadError
			if _, err := event.Decode(tc.req, 1<<20); !errors.As(err, &ip) {
				t.Errorf("got %v, want an invalid payload", err)
			}
		})
	}
	bomb := gz(t, bytes.Repeat([]byte("a"), 5<<20))
	if _, err := event.Decode(event.Request{Body: bomb}, 1<<20); !errors.Is(err, event.ErrTooLarge) {
		t.Errorf("gzip bomb: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		f.Add([]byte(fx.LZ64), "lz64", "")
	}
	f.Add(gz(f, []byte(`{"a":1}`)), "", "")
	f.Add([]byte("data=eyJhIjoxfQ%3D%3D"), "", "application/x-www-form-urlencoded")
	f.Add([]byte(`[{"event":"x"}]`), "gzip-js", "")
	f.Fuzz(func(t *testing.T, body []byte, compression, contentType string) {
		out, err := event.Decode(event.Request{Body: body, Compression: compression, ContentType: contentType}, 1<<16)
		if err == nil && len(out) > 1<<16 {
			t.Errorf("output of %d bytes over the bound", len(out))
		}
	})
}

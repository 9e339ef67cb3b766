// Package jsbundle holds the posthog-js bundles an edge serves under /static/: the snippet's
// array.js, array.full.js and the extensions the SDK loads lazily, taken from the official npm
// package at the version pinned in PIN and embedded in the binary, so an edge serves them
// with no network. dist/ is committed; `go generate` (the fetch program) rewrites it from the
// pinned tarball after checking its SHA-512, and `fetch -check` verifies the committed copy.
package jsbundle

//go:generate go run ./fetch -dir .

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
)

//go:embed PIN dist/*.js dist/LICENSE dist/SHA256SUMS
var files embed.FS

// Asset is one bundle as the edge serves it.
type Asset struct {
	// Name is the file name under /static/, e.g. "array.js".
	Name string
	// Body is the file as the npm package ships it.
	Body []byte
	// ETag is a strong entity tag: the first 16 bytes of the body's SHA-256, in hex.
	ETag string

	gzipOnce sync.Once
	gzipped  []byte
}

// Gzip returns the body gzip-compressed, compressed once on first use.
func (a *Asset) Gzip() []byte {
	a.gzipOnce.Do(func() {
		var b bytes.Buffer
		w, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		w.Write(a.Body) //nolint:errcheck // a bytes.Buffer does not fail
		w.Close()       //nolint:errcheck // a bytes.Buffer does not fail
		a.gzipped = b.Bytes()
	})
	return a.gzipped
}

var (
	// Version is the posthog-js version the bundles are from.
	Version string
	// Integrity is the pinned npm integrity (SHA-512) of that version's tarball.
	Integrity string
	assets    = map[string]*Asset{}
	names     []string
)

func init() {
	pin, err := files.ReadFile("PIN")
	if err != nil {
		panic(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(pin))
	for sc.Scan() {
		k, v, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		switch k {
		case "version":
			Version = v
		case "integrity":
			Integrity = v
		case "file":
			body, err := files.ReadFile("dist/" + v)
			if err != nil {
				panic(fmt.Sprintf("jsbundle: %s is pinned but not in dist/: run go generate ./edge/jsbundle", v))
			}
			h := sha256.Sum256(body)
			assets[v] = &Asset{Name: v, Body: body, ETag: `"` + hex.EncodeToString(h[:16]) + `"`}
			names = append(names, v)
		}
	}
}

// Lookup returns the bundle served as /static/<name>, or nil.
func Lookup(name string) *Asset { return assets[name] }

// Names lists the bundles, in the order PIN lists them.
func Names() []string { return append([]string(nil), names...) }

// Command fetch takes the posthog-js bundles the edge serves from the official npm package:
// it runs `npm pack posthog-js@<version>` for the version pinned in ../PIN, refuses the
// tarball unless its SHA-512 is the pinned integrity, and writes the pinned files, the
// package's LICENSE and a SHA256SUMS manifest into ../dist. With -check it writes nothing and
// fails when the committed files differ from the tarball's.
//
// Run it through `go generate ./edge/jsbundle` (or `make jsbundle`); `make jsbundle-check`
// runs the check.
package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	dir := flag.String("dir", ".", "the edge/jsbundle directory (holding PIN and dist/)")
	check := flag.Bool("check", false, "compare dist/ with the pinned tarball instead of writing it")
	flag.Parse()
	if err := run(*dir, *check); err != nil {
		fmt.Fprintln(os.Stderr, "jsbundle fetch:", err)
		os.Exit(1)
	}
}

// pin is what ../PIN says.
type pin struct {
	version, integrity string
	files              []string
}

func readPin(path string) (pin, error) {
	f, err := os.Open(path)
	if err != nil {
		return pin{}, err
	}
	defer f.Close()
	var p pin
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "version":
			p.version = v
		case "integrity":
			p.integrity = v
		case "file":
			if strings.ContainsAny(v, `/\`) || !strings.HasSuffix(v, ".js") {
				return pin{}, fmt.Errorf("PIN: bad file name %q", v)
			}
			p.files = append(p.files, v)
		default:
			return pin{}, fmt.Errorf("PIN: unknown line %q", line)
		}
	}
	if p.version == "" || !strings.HasPrefix(p.integrity, "sha512-") || len(p.files) == 0 {
		return pin{}, errors.New("PIN: version, a sha512 integrity and files are required")
	}
	return p, sc.Err()
}

func run(dir string, check bool) error {
	p, err := readPin(filepath.Join(dir, "PIN"))
	if err != nil {
		return err
	}
	tarball, err := pack(p.version)
	if err != nil {
		return err
	}
	sum := sha512.Sum512(tarball)
	if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != p.integrity {
		return fmt.Errorf("posthog-js@%s: tarball integrity %s, pinned %s", p.version, got, p.integrity)
	}
	files, err := extract(tarball, p.files)
	if err != nil {
		return err
	}
	var manifest strings.Builder
	for _, name := range p.files {
		h := sha256.Sum256(files["dist/"+name])
		fmt.Fprintf(&manifest, "%s  %s\n", hex.EncodeToString(h[:]), name)
	}
	want := map[string][]byte{"LICENSE": files["LICENSE"], "SHA256SUMS": []byte(manifest.String())}
	for _, name := range p.files {
		want[name] = files["dist/"+name]
	}
	dist := filepath.Join(dir, "dist")
	if check {
		return compare(dist, want)
	}
	if err := os.MkdirAll(dist, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		return err
	}
	for _, e := range entries { // files no longer pinned
		if _, ok := want[e.Name()]; !ok && !e.IsDir() {
			if err := os.Remove(filepath.Join(dist, e.Name())); err != nil {
				return err
			}
		}
	}
	for name, body := range want {
		if err := os.WriteFile(filepath.Join(dist, name), body, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("posthog-js@%s: %d files written to %s\n", p.version, len(want), dist)
	return nil
}

// pack downloads the package tarball with npm into a temporary directory and returns it.
func pack(version string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "posthog-js-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("npm", "pack", "posthog-js@"+version, "--json", "--pack-destination", tmp)
	cmd.Dir = tmp
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("npm pack posthog-js@%s: %w", version, err)
	}
	var packed []struct {
		Filename string `json:"filename"`
	}
	if err := json.Unmarshal(out, &packed); err != nil || len(packed) != 1 {
		return nil, fmt.Errorf("npm pack: unexpected output %q", out)
	}
	return os.ReadFile(filepath.Join(tmp, filepath.Base(packed[0].Filename)))
}

// extract returns the LICENSE and the named dist/ files of an npm tarball, by their path
// inside the package.
func extract(tarball []byte, names []string) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tarball))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		path := strings.TrimPrefix(h.Name, "package/")
		if h.Typeflag != tar.TypeReg || (path != "LICENSE" && !slices.Contains(names, strings.TrimPrefix(path, "dist/"))) ||
			(path != "LICENSE" && !strings.HasPrefix(path, "dist/")) {
			continue
		}
		body, err := io.ReadAll(io.LimitReader(tr, 16<<20))
		if err != nil {
			return nil, err
		}
		out[path] = body
	}
	for _, name := range append([]string{"LICENSE"}, names...) {
		key := name
		if name != "LICENSE" {
			key = "dist/" + name
		}
		if _, ok := out[key]; !ok {
			return nil, fmt.Errorf("the package has no %s", key)
		}
	}
	return out, nil
}

// compare reports every committed file that differs from the tarball's, and extra files.
func compare(dist string, want map[string][]byte) error {
	var bad []string
	for name, body := range want {
		got, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil || !bytes.Equal(got, body) {
			bad = append(bad, name)
		}
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, ok := want[e.Name()]; !ok {
			bad = append(bad, e.Name()+" (not pinned)")
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("dist/ differs from the pinned tarball: %s; run go generate ./edge/jsbundle", strings.Join(bad, ", "))
	}
	fmt.Printf("dist/ matches the pinned tarball (%d files)\n", len(want))
	return nil
}

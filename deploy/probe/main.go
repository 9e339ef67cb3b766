// Command flagedge-probe is the health-check client of the container image: the image is
// built FROM scratch, so it has no shell, curl or wget for a compose `healthcheck`. It GETs
// one URL and exits 0 when the answer is 2xx, 1 otherwise (Kubernetes does not need it: its
// httpGet probes are done by the kubelet).
//
//	flagedge-probe [-timeout 2s] [-insecure] http://127.0.0.1:8080/_ready
//
// It is its own module, with no dependencies, so that it stays out of the main module's
// build and tests.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("flagedge-probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 2*time.Second, "how long the whole request may take")
	// A probe dials its own container on 127.0.0.1, while the certificate names the public
	// host: verifying it would fail for the wrong reason. Only for loopback health checks.
	insecure := fs.Bool("insecure", false, "do not verify the server's TLS certificate")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: flagedge-probe [-timeout D] [-insecure] URL")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	client := &http.Client{
		Timeout: *timeout,
		// Proxy stays nil: a health check never goes through HTTP_PROXY.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: *insecure}}, //nolint:gosec // opt-in, for loopback probes

	}
	resp, err := client.Get(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "flagedge-probe:", err)
		return 1
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(stderr, "flagedge-probe: %s answered %s\n", fs.Arg(0), resp.Status)
		return 1
	}
	return 0
}

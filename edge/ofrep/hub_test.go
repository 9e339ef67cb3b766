package ofrep

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/clientip"
)

// TestRefusedOnTheHijackedConnection: a stream that passed the limits' check when asked but
// finds its place taken once its connection is handed over (another stream was admitted in
// between) is answered on that connection as the server answers a refusal — 429, Retry-After,
// OFREP's error body, the request's CORS headers — the connection is closed, and it holds
// no place.
func TestRefusedOnTheHijackedConnection(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	ips, _ := clientip.NewResolver("")
	sc := DefaultStreamConfig()
	sc.MaxPerAddr = 1
	hub := NewHub(sc, state.NewHolder("", log, nil), ips, log, nil)
	addr := netip.MustParseAddr("192.0.2.1")
	if err := hub.check(addr); err != nil {
		t.Fatalf("check with no stream open: %v", err)
	}
	if err := hub.admit(addr); err != nil { // the other stream
		t.Fatal(err)
	}
	server, client := net.Pipe()
	defer client.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		hub.run(server, &opening{projectID: 42, version: 1, addr: addr, head: []byte("HTTP/1.1 200 OK\r\n\r\n"),
			cors: [][2]string{{"Access-Control-Allow-Origin", "https://shop.example"}, {"Access-Control-Allow-Credentials", "true"}, {"Vary", "Origin"}}})
	}()
	client.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(client)
	var resp fasthttp.Response
	if err := resp.Read(r); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, h := range []string{"Content-Type", "Retry-After", "Connection", "Access-Control-Allow-Origin", "Access-Control-Allow-Credentials",
		"Access-Control-Expose-Headers", "Vary"} {
		got[h] = string(resp.Header.Peek(h))
	}
	got["status"] = string(resp.Header.Protocol()) + " " + fasthttp.StatusMessage(resp.StatusCode())
	got["body"] = string(resp.Body())
	want := map[string]string{"status": "HTTP/1.1 Too Many Requests", "Content-Type": "application/json", "Retry-After": "30", "Connection": "close",
		"Access-Control-Allow-Origin": "https://shop.example", "Access-Control-Allow-Credentials": "true", "Access-Control-Expose-Headers": exposeHeaders,
		"Vary": "Origin", "body": `{"errorCode":"GENERAL","errorDetails":"Too many change streams from this address."}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the refusal (-want +got):\n%s", diff)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		t.Errorf("after the refusal: %v, want the connection closed", err)
	}
	<-done
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if hub.total != 1 || hub.perAddr[addr] != 1 {
		t.Errorf("%d streams, %d of the address: want only the other one", hub.total, hub.perAddr[addr])
	}
}

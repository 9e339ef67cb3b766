package ofrep_test

import (
	"net"
	"strings"
	"testing"
	"time"
)

// streamsOpen is the flagedge_edge_ofrep_streams gauge of e's hub.
func (e *env) streamsOpen() float64 {
	e.t.Helper()
	families, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "flagedge_edge_ofrep_streams" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	e.t.Fatal("no flagedge_edge_ofrep_streams gauge")
	return 0
}

// TestResetPipelinedStreamsLeaveNoSlot is the audit's hole: a connection that pipelines a
// request and a stream behind it, then resets, makes fasthttp skip the stream's hijack
// handler (flushing the first answer fails). Many such connections, over either limit, must
// leave the streams gauge at 0 once they are gone, and a new stream is admitted.
func TestResetPipelinedStreamsLeaveNoSlot(t *testing.T) {
	const conns = 300
	for _, tc := range []struct {
		name                string
		maxStreams, perAddr int
	}{
		{"edge limit", 50, 10_000},
		{"address limit", 10_000, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := testStreamConfig()
			sc.MaxStreams, sc.MaxPerAddr = tc.maxStreams, tc.perAddr
			e := newEnvWith(t, envOptions{streams: &sc})
			url := e.streamURL("https://shop.example")
			host, path, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
			pipelined := []byte("GET /ofrep/v1/configuration HTTP/1.1\r\nHost: " + host + "\r\n\r\n" +
				"GET /" + path + " HTTP/1.1\r\nHost: " + host + "\r\nAccept: text/event-stream\r\n\r\n")
			deadline := time.Now().Add(20 * time.Second)
			for i := 0; i < conns && time.Now().Before(deadline); i++ {
				c, err := net.Dial("tcp", host)
				if err != nil {
					t.Fatal(err)
				}
				tcp := c.(*net.TCPConn)
				tcp.Write(pipelined)
				tcp.SetLinger(0) // Close resets the connection
				tcp.Close()
			}
			for wait := time.Now().Add(20 * time.Second); e.streamsOpen() != 0; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(wait) {
					t.Fatalf("streams gauge at %v 20 s after the last of %d reset connections, none open", e.streamsOpen(), conns)
				}
			}
			if status := openStreamStatus(t, url); status != "HTTP/1.1 200 OK" {
				t.Errorf("a new stream after the reset connections: %q", status)
			}
		})
	}
}

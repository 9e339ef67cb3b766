package syncpb_test

import (
	"bytes"
	"compress/flate"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/shared/syncpb"
)

func TestDeflateRoundTrip(t *testing.T) {
	pb := &syncpb.ProjectSnapshot{ProjectId: 7, Version: 42, Name: "web", ApiToken: "phc_x",
		Flags: []*syncpb.Flag{{Id: 1, Key: "beta", Active: true, Filters: []byte(`{"groups":[{"properties":[],"rollout_percentage":50}]}`)}}}
	d, err := syncpb.Deflate(pb)
	if err != nil {
		t.Fatal(err)
	}
	if d.ProjectId != 7 || d.Version != 42 {
		t.Errorf("labelled project %d version %d", d.ProjectId, d.Version)
	}
	got, err := syncpb.Inflate(d, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, pb) {
		t.Errorf("round trip: %v, want %v", got, pb)
	}
}

// TestInflateRefuses: a snapshot inflating past the limit (a compression bomb), one labelled
// with another project or version than it holds, and bytes that are not DEFLATE are refused.
func TestInflateRefuses(t *testing.T) {
	big := &syncpb.ProjectSnapshot{ProjectId: 1, Version: 1, Name: strings.Repeat("a", 1<<20)}
	d, err := syncpb.Deflate(big)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Deflated) > 8<<10 {
		t.Fatalf("a megabyte of one letter deflated to %d bytes", len(d.Deflated))
	}
	if _, err := syncpb.Inflate(d, 64<<10); err == nil || !strings.Contains(err.Error(), "inflates past") {
		t.Errorf("inflating past the limit: %v", err)
	}
	mislabelled, err := syncpb.Deflate(&syncpb.ProjectSnapshot{ProjectId: 2, Version: 9})
	if err != nil {
		t.Fatal(err)
	}
	mislabelled.Version = 10
	if _, err := syncpb.Inflate(mislabelled, 1<<20); err == nil {
		t.Error("a snapshot labelled with another version was accepted")
	}
	if _, err := syncpb.Inflate(&syncpb.DeflatedSnapshot{ProjectId: 1, Version: 1, Deflated: []byte("not deflate")}, 1<<20); err == nil {
		t.Error("bytes that are not DEFLATE were accepted")
	}
	// Valid DEFLATE of bytes that are not a ProjectSnapshot.
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestSpeed)
	w.Write([]byte{0xff, 0xff, 0xff})
	w.Close()
	if _, err := syncpb.Inflate(&syncpb.DeflatedSnapshot{ProjectId: 1, Version: 1, Deflated: buf.Bytes()}, 1<<20); err == nil {
		t.Error("a deflated non-snapshot was accepted")
	}
}

package syncpb

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"
)

// Deflate compresses a snapshot for edges that accept DeflatedSnapshot: the control plane
// does it once per version, whatever the number of edges it sends the snapshot to.
func Deflate(pb *ProjectSnapshot) (*DeflatedSnapshot, error) {
	raw, err := proto.Marshal(pb)
	if err != nil {
		return nil, fmt.Errorf("encode snapshot %d: %w", pb.ProjectId, err)
	}
	var buf bytes.Buffer
	w, err := flate.NewWriter(&buf, flate.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(raw); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return &DeflatedSnapshot{ProjectId: pb.ProjectId, Version: pb.Version, Deflated: buf.Bytes()}, nil
}

// Inflate decompresses a DeflatedSnapshot, refusing one that inflates past maxBytes (a
// message of that size sent uncompressed would have been refused too) or whose project or
// version differ from those it is labelled with.
func Inflate(d *DeflatedSnapshot, maxBytes int) (*ProjectSnapshot, error) {
	r := flate.NewReader(bytes.NewReader(d.Deflated))
	defer r.Close()
	raw, err := io.ReadAll(io.LimitReader(r, int64(maxBytes)+1))
	if err != nil {
		return nil, fmt.Errorf("inflate snapshot of project %d: %w", d.ProjectId, err)
	}
	if len(raw) > maxBytes {
		return nil, fmt.Errorf("snapshot of project %d inflates past %d bytes", d.ProjectId, maxBytes)
	}
	pb := &ProjectSnapshot{}
	if err := proto.Unmarshal(raw, pb); err != nil {
		return nil, fmt.Errorf("decode snapshot of project %d: %w", d.ProjectId, err)
	}
	if pb.ProjectId != d.ProjectId || pb.Version != d.Version {
		return nil, fmt.Errorf("deflated snapshot labelled project %d version %d holds project %d version %d",
			d.ProjectId, d.Version, pb.ProjectId, pb.Version)
	}
	return pb, nil
}

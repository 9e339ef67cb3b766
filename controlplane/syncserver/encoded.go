package syncserver

import (
	"github.com/flagedge/flagedge/shared/syncpb"
)

// A project's snapshot is encoded once per version for every stream (syncpb.EncodedResponse).

// encodedSnapshot is a snapshot's version and its encodings as field 1 (snapshots) and,
// compressed, field 10 (deflated_snapshots) of a WatchResponse, immutable once made.
type encodedSnapshot struct {
	version  int64
	field    []byte
	deflated []byte
}

func encodeSnapshot(pb *syncpb.ProjectSnapshot) (*encodedSnapshot, error) {
	field, err := syncpb.EncodeField(1, pb)
	if err != nil {
		return nil, err
	}
	d, err := syncpb.Deflate(pb)
	if err != nil {
		return nil, err
	}
	deflated, err := syncpb.EncodeField(10, d)
	if err != nil {
		return nil, err
	}
	if len(deflated) >= len(field) { // a small snapshot: compressing it gains nothing
		deflated = field
	}
	return &encodedSnapshot{version: pb.Version, field: field, deflated: deflated}, nil
}

// encoding returns the snapshot as a stream gets it: deflated to edges that accept it, where
// that is smaller.
func (e *encodedSnapshot) encoding(deflated bool) []byte {
	if deflated {
		return e.deflated
	}
	return e.field
}

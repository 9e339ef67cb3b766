package syncpb

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// SortLiveEdges orders a ListEdges answer by token hash, as FingerprintLiveEdges expects.
func SortLiveEdges(edges []*LiveEdge) {
	slices.SortFunc(edges, func(a, b *LiveEdge) int { return bytes.Compare(a.TokenSha256, b.TokenSha256) })
}

// FingerprintLiveEdges is the fingerprint of a sorted ListEdges answer: the same list gives
// the same fingerprint on every control-plane replica and relay, so that a relay polling it
// is sent the list again only when it changed.
func FingerprintLiveEdges(edges []*LiveEdge) []byte {
	h := sha256.New()
	var n [8]byte
	for _, e := range edges {
		for _, s := range []string{string(e.TokenSha256), e.Id, e.Name} {
			binary.BigEndian.PutUint64(n[:], uint64(len(s)))
			h.Write(n[:])
			h.Write([]byte(s))
		}
		if e.AllProjects {
			h.Write([]byte{1})
		} else {
			h.Write([]byte{0})
		}
		binary.BigEndian.PutUint64(n[:], uint64(len(e.Projects)))
		h.Write(n[:])
		for _, p := range e.Projects {
			binary.BigEndian.PutUint64(n[:], uint64(p))
			h.Write(n[:])
		}
	}
	return h.Sum(nil)
}

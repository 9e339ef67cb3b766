package syncserver

import (
	"github.com/flagedge/flagedge/controlplane/bloomhub"
	"github.com/flagedge/flagedge/shared/bloomkeys"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// sendMembership sends a stream's membership changes in order: the reset, the whole filters,
// then the additions. Filters and additions are encoded once for every stream they go to
// (bloomhub shares them) and sent as they are.
func sendMembership(stream syncpb.Sync_WatchServer, c bloomhub.Changes) error {
	fields := make([][]byte, 0, len(c.Filters)+len(c.Additions))
	for _, f := range c.Filters {
		if f.Bytes > bloomkeys.MaxFilterBytes {
			continue // the edge looks this project's keys up (its additions are dropped there too)
		}
		fields = append(fields, f.Encoded(encodeFilter))
	}
	for _, a := range c.Additions {
		fields = append(fields, a.Encoded(encodeAddition))
	}
	return syncpb.SendMembership(stream, c.Reset, fields)
}

// encodeFilter encodes a filter as a WatchResponse's membership_filters (6). Its fields are
// integers and bytes, whose encoding cannot fail.
func encodeFilter(f *bloomhub.Filter) []byte {
	field, _ := syncpb.EncodeField(6, &syncpb.MembershipFilter{ProjectId: f.ProjectID, Bloom: f.Raw, Keys: int64(f.Keys)})
	return field
}

// encodeAddition encodes an addition as a WatchResponse's membership_additions (7), which
// cannot fail either.
func encodeAddition(a *bloomhub.Addition) []byte {
	field, _ := syncpb.EncodeField(7, &syncpb.MembershipAdditions{ProjectId: a.ProjectID, Keys: a.Keys})
	return field
}

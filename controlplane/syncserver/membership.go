package syncserver

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flagedge/flagedge/controlplane/bloomhub"
	"github.com/flagedge/flagedge/shared/bloomkeys"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// membershipMessageBytes is about the most filter bytes or keys one Watch message carries;
// a larger filter goes alone (up to shared/bloomhub.MaxFilterBytes; the edge accepts
// messages of twice that).
const membershipMessageBytes = 1 << 20

// resetField is a WatchResponse's membership_reset (5) set.
var resetField = protowire.AppendVarint(protowire.AppendTag(nil, 5, protowire.VarintType), 1)

// sendMembership sends a stream's membership changes in order: the reset, the whole filters,
// then the additions. Filters and additions are encoded once for every stream they go to
// (bloomhub shares them) and sent as they are.
func sendMembership(stream syncpb.Sync_WatchServer, c bloomhub.Changes) error {
	var parts [][]byte
	size, reset := 0, c.Reset
	flush := func(force bool) error {
		if !force && size < membershipMessageBytes {
			return nil
		}
		if !reset && len(parts) == 0 {
			return nil
		}
		var head []byte
		if reset {
			head = resetField
		}
		if err := stream.SendMsg(&syncpb.EncodedResponse{Parts: append([][]byte{head}, parts...)}); err != nil {
			return err
		}
		parts, size, reset = parts[:0], 0, false
		return nil
	}
	for _, f := range c.Filters {
		if f.Bytes > bloomkeys.MaxFilterBytes {
			continue // the edge looks this project's keys up (its additions are dropped there too)
		}
		parts = append(parts, f.Encoded(encodeFilter))
		size += len(f.Raw)
		if err := flush(false); err != nil {
			return err
		}
	}
	for _, a := range c.Additions {
		field := a.Encoded(encodeAddition)
		parts = append(parts, field)
		size += len(field)
		if err := flush(false); err != nil {
			return err
		}
	}
	return flush(true)
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

package syncserver

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flagedge/flagedge/controlplane/bloomhub"
	"github.com/flagedge/flagedge/shared/bloomkeys"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// membershipMessageBytes is about the most filter bytes or keys one Watch message carries;
// a larger filter goes alone (up to shared/bloomhub.MaxFilterBytes; the edge accepts
// messages of twice that).
const membershipMessageBytes = 1 << 20

// sendMembership sends a stream's membership changes in order: the reset, the whole filters,
// then the additions.
func sendMembership(stream syncpb.Sync_WatchServer, c bloomhub.Changes) error {
	msg := &syncpb.WatchResponse{MembershipReset: c.Reset}
	size := 0
	flush := func(force bool) error {
		if !force && size < membershipMessageBytes {
			return nil
		}
		if !msg.MembershipReset && len(msg.MembershipFilters) == 0 && len(msg.MembershipAdditions) == 0 {
			return nil
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		msg, size = &syncpb.WatchResponse{}, 0
		return nil
	}
	for id, f := range c.Filters {
		if f.Bloom.Cap()/8 > bloomkeys.MaxFilterBytes {
			continue // the edge looks this project's keys up (its additions are dropped there too)
		}
		raw, err := f.Bloom.MarshalBinary()
		if err != nil {
			return status.Errorf(codes.Internal, "encode membership filter: %v", err)
		}
		msg.MembershipFilters = append(msg.MembershipFilters, &syncpb.MembershipFilter{ProjectId: id, Bloom: raw, Keys: int64(f.Keys)})
		size += len(raw)
		if err := flush(false); err != nil {
			return err
		}
	}
	for id, keys := range c.Additions {
		for len(keys) > 0 {
			add := &syncpb.MembershipAdditions{ProjectId: id}
			for len(keys) > 0 && size < membershipMessageBytes {
				add.Keys = append(add.Keys, keys[0])
				size += len(keys[0]) + 2
				keys = keys[1:]
			}
			msg.MembershipAdditions = append(msg.MembershipAdditions, add)
			if err := flush(false); err != nil {
				return err
			}
		}
	}
	return flush(true)
}

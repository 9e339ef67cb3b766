// Package bloomkeys is the contract of the membership filters (Bloom filters) the control
// plane sends its edges: which keys stand for a person's distinct id and for a group, and how
// big a filter is made for a number of keys. A filter tells an edge, without asking, that the
// control plane stores nothing about a distinct id or a group — most first visits — so that
// /decide answers from the request alone instead of paying a round trip that finds nothing.
package bloomkeys

import (
	"errors"
	"strconv"

	"github.com/bits-and-blooms/bloom/v3"
)

// FalsePositiveRate is the share of keys absent from a filter that it nevertheless holds
// while it has no more keys than its capacity: each costs one look-up that finds nothing.
const FalsePositiveRate = 0.01

// MinCapacity is the capacity of the smallest filter (about 1.2 KB): a project with few
// persons may grow for a while before its filter has to be rebuilt.
const MinCapacity = 1024

// Capacity is the number of keys a filter built for n keys is sized for: twice n, so that a
// project can double before the control plane rebuilds its filter.
func Capacity(n int) int { return max(2*n, MinCapacity) }

// NewFilter returns an empty filter sized for Capacity(n) keys at FalsePositiveRate.
func NewFilter(n int) *bloom.BloomFilter {
	return bloom.NewWithEstimates(uint(Capacity(n)), FalsePositiveRate)
}

// MaxFilterBytes is the largest filter the control plane sends (about 28 million distinct
// ids as built): a project past it has no filter, and its edges look up every key. Edges
// accept messages of twice this size.
const MaxFilterBytes = 64 << 20

// The first byte of a key says what it stands for.
const (
	personPrefix = 'p'
	groupPrefix  = 'g'
)

// PersonKey appends the key of a distinct id to dst.
func PersonKey(dst []byte, distinctID string) []byte {
	return append(append(dst, personPrefix), distinctID...)
}

// GroupKey appends the key of a group (its type index, 0–4, and key) to dst.
func GroupKey(dst []byte, typeIndex int, key string) []byte {
	return append(append(dst, groupPrefix, byte('0'+typeIndex)), key...)
}

// ErrBadKey is returned for a key that neither PersonKey nor GroupKey makes.
var ErrBadKey = errors.New("membership: malformed key")

// Key is a decoded key.
type Key struct {
	Group      bool
	TypeIndex  int    // the group type index, for a group
	DistinctID string // for a person
	GroupKey   string // for a group
}

// ParseKey decodes a key made by PersonKey or GroupKey.
func ParseKey(k []byte) (Key, error) {
	switch {
	case len(k) >= 1 && k[0] == personPrefix:
		return Key{DistinctID: string(k[1:])}, nil
	case len(k) >= 2 && k[0] == groupPrefix && k[1] >= '0' && k[1] <= '4':
		return Key{Group: true, TypeIndex: int(k[1] - '0'), GroupKey: string(k[2:])}, nil
	}
	return Key{}, ErrBadKey
}

// EventRefs returns what storing an event makes the control plane hold, and so what a
// filter must hold once the event is stored: a person for its distinct id (ingestion gives
// every distinct id one), for the anonymous id an $identify merges, for the alias of
// $create_alias and $merge_dangerously; the group of $groupidentify (groupType "" when none).
// props are the event's decoded properties; only those four events read them.
func EventRefs(name, distinctID string, props map[string]any) (distinctIDs []string, groupType, groupKey string) {
	distinctIDs = []string{distinctID}
	switch name {
	case "$identify":
		if anon := IDString(props["$anon_distinct_id"]); anon != "" {
			distinctIDs = append(distinctIDs, anon)
		}
	case "$create_alias", "$merge_dangerously":
		if alias := IDString(props["alias"]); alias != "" {
			distinctIDs = append(distinctIDs, alias)
		}
	case "$groupidentify":
		if t, k := IDString(props["$group_type"]), IDString(props["$group_key"]); t != "" && k != "" {
			groupType, groupKey = t, k
		}
	}
	return distinctIDs, groupType, groupKey
}

// ReadsProperties reports whether EventRefs needs the event's properties.
func ReadsProperties(name string) bool {
	switch name {
	case "$identify", "$create_alias", "$merge_dangerously", "$groupidentify":
		return true
	}
	return false
}

// IDString is the string form of an id-like property value (strings and numbers), as
// ingestion stores distinct ids, aliases and group keys; "" for anything else.
func IDString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return ""
}

// Fold returns a filter in its binary encoding (as MembershipFilter.bloom carries it) with
// keys added: a relay folds the additions it holds into the filter it passes on, so that
// what it holds stays about the filter's size.
func Fold(encoded []byte, keys [][]byte) ([]byte, error) {
	b := &bloom.BloomFilter{}
	if err := b.UnmarshalBinary(encoded); err != nil {
		return nil, err
	}
	for _, k := range keys {
		b.Add(k)
	}
	return b.MarshalBinary()
}

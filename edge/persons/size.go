package persons

import (
	"unsafe"

	"github.com/flagedge/flagedge/shared/flags"
)

// The caches are bounded by bytes, so what an entry costs is estimated from what it holds:
// the struct, its strings' bytes, and its maps' and slices' contents with Go's usual overhead
// per map entry. An estimate, not an exact count: it errs high on small maps.

// typicalEntryBytes is about what a person with a dozen properties costs: the caches' admission
// counters are sized for their budget divided by it.
const typicalEntryBytes = 1024

// markBytes is about what one mark of a person created here costs in its map.
const markBytes = 40

// mapEntryBytes is a map entry's overhead beyond its key and value (buckets, tophash, load).
const mapEntryBytes = 16

func (p *Person) size() int64 {
	n := int64(unsafe.Sizeof(*p)) + int64(len(p.distinctID)) + propertiesSize(p.Properties) + int64(8*len(p.StaticCohorts))
	for k, v := range p.HashKeyOverrides {
		n += 32 + mapEntryBytes + int64(len(k)+len(v))
	}
	return n
}

func (g *group) size() int64 {
	return int64(unsafe.Sizeof(*g)) + int64(len(g.key)) + propertiesSize(g.properties)
}

func (ov *overlay) size() int64 {
	n := int64(unsafe.Sizeof(*ov)) + int64(len(ov.distinctID)) + propertiesSize(ov.set) + propertiesSize(ov.setOnce)
	for _, k := range ov.unset {
		n += 16 + int64(len(k))
	}
	return n
}

// propertiesSize estimates the memory of decoded JSON properties.
func propertiesSize(p flags.Properties) int64 {
	if p == nil {
		return 0
	}
	n := int64(48) // the map's header
	for k, v := range p {
		n += 16 + mapEntryBytes + int64(len(k)) + valueSize(v)
	}
	return n
}

// valueSize estimates a decoded JSON value: the interface's two words and what it points to.
func valueSize(v any) int64 {
	switch x := v.(type) {
	case string:
		return 16 + 16 + int64(len(x))
	case []any:
		n := int64(16 + 24)
		for _, e := range x {
			n += valueSize(e)
		}
		return n
	case map[string]any:
		return 16 + propertiesSize(x)
	case flags.Properties:
		return 16 + propertiesSize(x)
	default: // numbers, booleans, nil
		return 16 + 8
	}
}

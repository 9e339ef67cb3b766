package decide

import (
	"math/rand/v2"
	"time"

	"github.com/flagedge/flagedge/edge/jsonenc"
	"github.com/flagedge/flagedge/shared/flags"
)

func wanted(want []bool, i int) bool { return want == nil || want[i] }

// appendDecide writes the /decide answer of versions 1 to 3, with the project's client
// configuration members; keys[i] is the JSON string of results[i].Key, followed by `:true`
// in its capacity (state.Project's AnswerKeys), and payloaded the indices of the results
// that may carry a payload (flags.Snapshot.Payloaded).
func appendDecide(b, members []byte, keys [][]byte, results []flags.Result, payloaded []int, want []bool, errored bool, version int) []byte {
	b = append(b, '{')
	b = append(b, members...)
	b = append(b, `,"errorComputingFlags":`...)
	b = jsonenc.AppendBool(b, errored)
	b = append(b, `,"errorsWhileComputingFlags":`...)
	b = jsonenc.AppendBool(b, errored)
	b = append(b, `,"featureFlags":`...)
	switch {
	case version <= 1:
		b = append(b, '[')
		n := 0
		for i := range results {
			r := &results[i]
			if r.Enabled && wanted(want, i) {
				if n > 0 {
					b = append(b, ',')
				}
				b = append(b, keys[i]...)
				n++
			}
		}
		b = append(b, ']')
	default:
		b = append(b, '{')
		n := 0
		for i := range results {
			r := &results[i]
			if !r.Active || r.Failed || !wanted(want, i) || (version == 2 && !r.Enabled) {
				continue
			}
			if n > 0 {
				b = append(b, ',')
			}
			if k := keys[i]; r.Enabled && r.Variant == "" {
				b = append(b, k[:cap(k)]...) // "key":true
			} else {
				b = append(b, k[:cap(k)-len("true")]...) // "key":
				b = appendValue(b, r)
			}
			n++
		}
		b = append(b, '}')
	}
	if version >= 3 {
		b = append(b, `,"featureFlagPayloads":{`...)
		n := 0
		for _, i := range payloaded {
			if i >= len(results) { // none, with disable_flags; payloaded is in order
				break
			}
			r := &results[i]
			if !r.Enabled || r.Payload == nil || !wanted(want, i) {
				continue
			}
			if n > 0 {
				b = append(b, ',')
			}
			b = append(b, keys[i][:cap(keys[i])-len("true")]...) // "key":
			b = append(b, r.Payload...)
			n++
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendValue(b []byte, r *flags.Result) []byte {
	switch {
	case !r.Enabled:
		return append(b, "false"...)
	case r.Variant != "":
		return jsonenc.AppendString(b, r.Variant)
	}
	return append(b, "true"...)
}

// appendFlagsV2 writes the flags v2 answer, with the client configuration members when config
// is set; each flag's metadata carries the snapshot version the answer was computed from.
// keys are the results' keys as JSON strings, as for appendDecide.
func appendFlagsV2(b, members, snapshotVersion []byte, keys [][]byte, results []flags.Result, want []bool, errored, config bool) []byte {
	b = append(b, '{')
	if config {
		b = append(b, members...)
		b = append(b, ',')
	}
	b = append(b, `"flags":{`...)
	n := 0
	for i := range results {
		r := &results[i]
		if !r.Active || !wanted(want, i) {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, keys[i]...)
		b = append(b, `:{"key":`...)
		b = append(b, keys[i]...)
		b = append(b, `,"enabled":`...)
		b = jsonenc.AppendBool(b, r.Enabled)
		b = append(b, `,"variant":`...)
		if r.Variant != "" {
			b = jsonenc.AppendString(b, r.Variant)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"reason":{"code":`...)
		b = jsonenc.AppendString(b, r.Reason.String())
		b = append(b, `,"condition_index":`...)
		if r.ConditionIndex >= 0 {
			b = jsonenc.AppendInt(b, int64(r.ConditionIndex))
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"description":`...)
		b = jsonenc.AppendString(b, r.Reason.Description(r.ConditionIndex))
		b = append(b, `},"metadata":{"id":`...)
		b = jsonenc.AppendInt(b, r.ID)
		b = append(b, `,"version":`...)
		b = jsonenc.AppendInt(b, int64(r.Version))
		b = append(b, `,"snapshot_version":`...)
		b = append(b, snapshotVersion...)
		b = append(b, `,"description":null,"payload":`...)
		switch {
		case r.Payload == nil || !r.Enabled:
			b = append(b, "null"...)
		case r.Payload[0] == '"':
			b = append(b, r.Payload...)
		default:
			b = jsonenc.AppendString(b, string(r.Payload))
		}
		b = append(b, '}')
		if r.Failed {
			b = append(b, `,"failed":true`...)
		}
		b = append(b, '}')
	}
	b = append(b, `},"errorsWhileComputingFlags":`...)
	b = jsonenc.AppendBool(b, errored)
	return appendFresh(b)
}

// freshMembers starts what appendFresh writes.
const freshMembers = `,"requestId":`

// appendFresh ends a flags v2 answer with the members that are new for every request, its
// requestId and evaluatedAt: a kept answer given again (edge/answercache) gets them afresh.
func appendFresh(b []byte) []byte {
	b = append(b, freshMembers...)
	b = jsonenc.AppendUUID(b, rand.Uint64(), rand.Uint64())
	b = append(b, `,"evaluatedAt":`...)
	b = jsonenc.AppendInt(b, time.Now().UnixMilli())
	return append(b, '}')
}

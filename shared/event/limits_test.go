package event_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/shared/event"
)

var testLimits = event.Limits{MaxEvents: 3, MaxValues: 40, MaxProperties: 4, MaxDepth: 5, MaxKeyBytes: 10, MaxStringBytes: 16}

func TestScanCountsAndRefuses(t *testing.T) {
	for _, tc := range []struct {
		name      string
		body      string
		want      event.Stats
		overLimit string // the limit passed; empty when none
	}{
		{"array of events", `[{"event":"a"},{"event":"b"}]`, event.Stats{Events: 2, Values: 5}, ""},
		{"batch object", `{"api_key":"k","batch":[{"event":"a"},{"event":"b","properties":{"x":[1,2]}}]}`, event.Stats{Events: 2, Values: 11}, ""},
		{"data array", `{"data":[{},{},{}]}`, event.Stats{Events: 3, Values: 5}, ""},
		{"one event", `{"event":"a","properties":{"k":"v"}}`, event.Stats{Values: 4}, ""},
		{"nested arrays are not events", `{"batch":[{"p":[1,2,3,4]}]}`, event.Stats{Events: 1, Values: 8}, ""},
		{"escaped quotes", `{"k":"a\"b\\"}`, event.Stats{Values: 2}, ""},
		{"too many events", `[{},{},{},{}]`, event.Stats{}, "events in a batch"},
		{"too many batch events", `{"batch":[1,2,3,4]}`, event.Stats{}, "events in a batch"},
		{"too many properties", `{"a":1,"b":2,"c":3,"d":4,"e":5}`, event.Stats{}, "properties in an object"},
		{"too deep", `[[[[[[1]]]]]]`, event.Stats{}, "levels of nesting"},
		{"long key", `{"abcdefghijk":1}`, event.Stats{}, "bytes in a key"},
		{"long string", `{"k":"` + strings.Repeat("x", 17) + `"}`, event.Stats{}, "bytes in a string"},
		{"too many values", `{"k":[` + strings.Repeat("1,", 40) + `1]}`, event.Stats{}, "values in a request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := event.Scan([]byte(tc.body), testLimits)
			var limit *event.LimitError
			switch {
			case tc.overLimit == "" && err != nil:
				t.Fatalf("Scan: %v", err)
			case tc.overLimit == "":
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("stats (-want +got):\n%s", diff)
				}
			case !errors.As(err, &limit) || limit.Limit != tc.overLimit:
				t.Errorf("Scan = %v, want over %q", err, tc.overLimit)
			}
		})
	}
}

// TestScanAllocatesNothing: the scan runs before anything is admitted, so it must cost no
// memory of its own.
func TestScanAllocatesNothing(t *testing.T) {
	body := []byte(`{"batch":[{"event":"a","properties":{"k":"v","n":1.5,"t":true}}]}`)
	if n := testing.AllocsPerRun(100, func() { event.Scan(body, testLimits) }); n != 0 {
		t.Errorf("%v allocations per scan", n)
	}
}

// TestDecodeReservesWhatItTakes: decompressing asks the caller for its output before taking
// it, and stops when refused.
func TestDecodeReservesWhatItTakes(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(bytes.Repeat([]byte(`{"a":1}`), 200_000)) // 1.4 MB from a few kB
	zw.Close()
	reserved := 0
	out, err := event.Decode(event.Request{Body: buf.Bytes(), Reserve: func(n int) error { reserved += n; return nil }}, 2<<20)
	if err != nil || len(out) != 1_400_000 || reserved < len(out) || reserved > 2*len(out) {
		t.Errorf("got %d bytes, %v, having reserved %d", len(out), err, reserved)
	}
	refused := errors.New("budget spent")
	_, err = event.Decode(event.Request{Body: buf.Bytes(), Reserve: func(n int) error {
		if reserved -= n; reserved < 1_000_000 {
			return refused
		}
		return nil
	}}, 2<<20)
	if !errors.Is(err, refused) {
		t.Errorf("refused reservation: %v", err)
	}
}

func FuzzScan(f *testing.F) {
	f.Add([]byte(`{"batch":[{"event":"a","properties":{"k":"v"}}]}`))
	f.Add([]byte(`[{"event":"a\"\\"},{}]`))
	f.Add([]byte(`]]]}}}`))
	f.Add([]byte(`"unterminated`))
	f.Fuzz(func(t *testing.T, body []byte) {
		st, err := event.Scan(body, testLimits)
		if err == nil && (st.Events > testLimits.MaxEvents || st.Values > testLimits.MaxValues) {
			t.Errorf("%+v passed the limits", st)
		}
	})
}

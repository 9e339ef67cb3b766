package decide

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/shared/flags"
)

// Of a repeated person_properties or group_properties field the last counts, whole: the
// first's properties are not merged into it, and no group's map is reused for another's.
func TestRepeatedPropertyFieldsLastCounts(t *testing.T) {
	s := &scratch{person: flags.Properties{}, groupProps: map[string]flags.Properties{}}
	body := `{"distinct_id":"u","person_properties":{"plan":"free","seen":1},"person_properties":{"plan":"pro"},` +
		`"group_properties":{"company":{"plan":"free"},"team":{"size":3}},"group_properties":{"project":{"tier":"x"}}}`
	for range 2 { // the scratch's maps reused
		if err := s.parse([]byte(body)); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(flags.Properties{"plan": "pro"}, s.in.personProperties); diff != "" {
			t.Errorf("person properties (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]flags.Properties{"project": {"tier": "x"}}, s.in.groupProperties); diff != "" {
			t.Errorf("group properties (-want +got):\n%s", diff)
		}
	}
}

// A body that is not JSON is answered with what is wrong and where.
func TestSyntaxErrorSaysWhere(t *testing.T) {
	s := &scratch{person: flags.Properties{}, groupProps: map[string]flags.Properties{}}
	for body, want := range map[string]string{
		`{"distinct_id":"a",}`:  `unexpected character in JSON at byte 19 near "}"`,
		`{"distinct_id":"a"} x`: `unexpected data after the JSON value at byte 20 near "x"`,
		`{"distinct_id":"a`:     `missing closing '"' in JSON string at byte 16 near "a"`,
		`   `:                   `cannot parse empty JSON`,
	} {
		if err := s.parse([]byte(body)); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", body, err, want)
		}
	}
}

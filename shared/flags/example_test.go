package flags_test

import (
	"encoding/json"
	"fmt"

	"github.com/flagedge/flagedge/shared/flags"
)

func ExampleSnapshot_Evaluate() {
	snap, err := flags.Compile(flags.Project{Flags: []flags.FlagDefinition{{
		ID: 1, Key: "new-checkout", Active: true,
		Filters: json.RawMessage(`{"groups": [{"properties": [
			{"key": "email", "value": "@example.com", "operator": "icontains", "type": "person"}]}],
			"payloads": {"true": "{\"banner\": true}"}}`),
	}}})
	if err != nil {
		panic(err)
	}
	results := snap.Evaluate(&flags.Request{
		DistinctID:       "user-1",
		PersonProperties: flags.Properties{"email": "Alice@Example.com"},
	}, nil)
	r := results[snap.Lookup("new-checkout")]
	fmt.Println(r.Value(), r.Reason, r.ConditionIndex, string(r.Payload))
	// Output: true condition_match 0 "{\"banner\": true}"
}

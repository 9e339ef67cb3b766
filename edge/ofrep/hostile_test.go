package ofrep_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/edge/decide"
	"github.com/flagedge/flagedge/edge/ofrep"
	"github.com/flagedge/flagedge/edge/reqbody"
)

// refusals is the refusal counter's value for reason in e's registry.
func (e *env) refusals(reason string) float64 {
	e.t.Helper()
	families, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "flagedge_edge_refused_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestHostileContextsAreRefused: a context over one of /flags's limits of what a body holds
// (values, keys of an object, nesting, the length of a key or a string) is answered 413
// PARSE_ERROR naming the limit, in OFREP's shape, on both evaluation routes — as /flags
// answers the same properties 413, with the same words — and counted as an oversize refusal.
// Among them the audit's body: 1 MB of empty objects, which OFREP used to parse whole.
func TestHostileContextsAreRefused(t *testing.T) {
	e := newEnv(t, false, 0)
	lim := decide.Limits()
	keys := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `,"p%d":1`, i)
		}
		return b.String()[1:]
	}
	auth := "Authorization: Bearer " + token
	for _, tc := range []struct {
		name, props, limit string
	}{
		{"deep nesting", `"p":` + strings.Repeat("[", 3000) + strings.Repeat("]", 3000), fmt.Sprintf("more than %d levels of nesting", lim.MaxDepth)},
		{"333k empty objects", `"p":[` + strings.Repeat("{},", 333_000) + `{}]`, fmt.Sprintf("more than %d values in a request", lim.MaxValues)},
		{"huge string", `"p":"` + strings.Repeat("x", lim.MaxStringBytes+1) + `"`, fmt.Sprintf("more than %d bytes in a string", lim.MaxStringBytes)},
		{"many keys", keys(lim.MaxProperties + 1), fmt.Sprintf("more than %d properties in an object", lim.MaxProperties)},
		// Padded over the 4 KiB up to which a body is not scanned (as /flags's).
		{"long key", `"pad":"` + strings.Repeat("x", 4<<10) + `","` + strings.Repeat("k", lim.MaxKeyBytes+1) + `":1`, fmt.Sprintf("more than %d bytes in a key", lim.MaxKeyBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := len(ctxBody(tc.props)); n > ofrep.MaxBodyBytes {
				t.Fatalf("a body of %d bytes: over the size limit, not the one tested", n)
			}
			details := "The request is over a limit: " + tc.limit + "."
			f := e.do("POST", "/flags/?v=2", `{"token":"`+token+`","distinct_id":"u","person_properties":{`+tc.props+`}}`)
			if f.status != 413 || f.body["detail"] != details {
				t.Errorf("/flags: %d %v, want 413 %q", f.status, f.body["detail"], details)
			}
			for _, key := range []string{"", "static-on"} {
				path, want := "/ofrep/v1/evaluate/flags", map[string]any{"errorCode": "PARSE_ERROR", "errorDetails": details}
				if key != "" {
					path, want["key"] = path+"/"+key, key
				}
				a := e.do("POST", path, ctxBody(`"targetingKey":"u",`+tc.props), auth)
				if a.status != 413 {
					t.Fatalf("%s: status %d, want 413: %.200s", path, a.status, a.raw)
				}
				if diff := cmp.Diff(want, a.body); diff != "" {
					t.Errorf("%s (-want +got):\n%s", path, diff)
				}
			}
		})
	}
	if got := e.refusals("oversize"); got != 15 {
		t.Errorf("oversize refusals counted: %v, want 15 (5 /flags, 10 OFREP)", got)
	}
}

// TestScannedBodyThatIsNotJSON: a body the limits' scan finds is not JSON (a closing bracket
// with nothing open; found by FuzzParseRequest) is 400 PARSE_ERROR, as one the parser finds.
func TestScannedBodyThatIsNotJSON(t *testing.T) {
	e := newEnv(t, false, 0)
	a := e.do("POST", "/ofrep/v1/evaluate/flags", ctxBody(`"targetingKey":"u","pad":"`+strings.Repeat("x", 4<<10)+`"}}}`), "Authorization: Bearer "+token)
	want := map[string]any{"errorCode": "PARSE_ERROR", "errorDetails": "The body is not an evaluation request: unbalanced '}'"}
	if diff := cmp.Diff(want, a.body); a.status != 400 || diff != "" {
		t.Errorf("status %d, want 400; answer (-want +got):\n%s", a.status, diff)
	}
}

// TestEvaluationsReserveFromTheInflightBudget: OFREP's evaluations hold their bodies in the
// in-flight budget /flags reserves from (--max-inflight-bytes). While it is spent, a body
// that needs it waits, then gets /flags's 503 with Retry-After: 1, in OFREP's shape, counted
// as a budget refusal; a small body, which /flags holds nothing of either, is served. Once
// the budget is given back the same body is served, and nothing stays held.
func TestEvaluationsReserveFromTheInflightBudget(t *testing.T) {
	budget := reqbody.NewBudget(1 << 20)
	e := newEnvWith(t, envOptions{budget: budget})
	auth := "Authorization: Bearer " + token
	pad := strings.Repeat("x", 16<<10) // more than fasthttp reads with the headers
	large := ctxBody(`"targetingKey":"u1","pad":"` + pad + `"`)

	hog := budget.Lease()
	if err := hog.Reserve(1 << 20); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f := e.do("POST", "/flags/?v=2", `{"token":"`+token+`","distinct_id":"u1","person_properties":{"pad":"`+pad+`"}}`)
	if f.status != 503 || f.header.Get("Retry-After") != "1" || f.body["code"] != "busy" {
		t.Errorf("/flags with the budget spent: %d Retry-After %q %s", f.status, f.header.Get("Retry-After"), f.raw)
	}
	for _, key := range []string{"", "static-on"} {
		path, want := "/ofrep/v1/evaluate/flags", map[string]any{"errorCode": "GENERAL", "errorDetails": "The edge is busy; retry later."}
		if key != "" {
			path, want["key"] = path+"/"+key, key
		}
		a := e.do("POST", path, large, auth)
		if a.status != 503 || a.header.Get("Retry-After") != "1" {
			t.Errorf("%s with the budget spent: %d Retry-After %q %.200s", path, a.status, a.header.Get("Retry-After"), a.raw)
			continue
		}
		if diff := cmp.Diff(want, a.body); diff != "" {
			t.Errorf("%s (-want +got):\n%s", path, diff)
		}
	}
	if waited := time.Since(start); waited < 3*reqbody.BudgetWait {
		t.Errorf("three refusals after %v, want a wait of %v before each", waited, reqbody.BudgetWait)
	}
	if got := e.refusals("inflight_budget"); got != 3 {
		t.Errorf("in-flight budget refusals counted: %v, want 3 (1 /flags, 2 OFREP)", got)
	}
	if a := e.do("POST", "/ofrep/v1/evaluate/flags", ctxBody(`"targetingKey":"u1"`), auth); a.status != 200 {
		t.Errorf("a small body with the budget spent: %d %s", a.status, a.raw)
	}
	hog.Release()
	if a := e.do("POST", "/ofrep/v1/evaluate/flags", large, auth); a.status != 200 {
		t.Errorf("after the budget is given back: %d %.200s", a.status, a.raw)
	}
	if budget.Held() != 0 {
		t.Errorf("%d bytes still held after the requests", budget.Held())
	}
}

package console

import (
	"encoding/json"
	"errors"
	"math"
	"net/url"
	"testing"

	"github.com/flagedge/flagedge/controlplane"
)

// FuzzFilterForm: whatever the flag form posts, reading it, applying its button and building
// the filters never panics; the filters built are JSON with every rollout a number from 0 to
// 100, and anything else is a form error naming a field (shown on the page as a 400).
func FuzzFilterForm(f *testing.F) {
	for _, seed := range []string{
		"cond_count=1&c0_rollout=50",
		"cond_count=2&c0_rollout=NaN&action=remove_condition_-1",
		"cond_count=1&c0_rollout=1e309&action=add_condition",
		"var_count=2&v0_key=a&v0_pct=50&v1_key=b&v1_pct=Inf&action=remove_variant_-1",
		"cond_count=1&c0_props=1&c0_p0_key=email&c0_p0_op=exact&c0_p0_value=%00&action=add_property_-1",
		"group_type=-1&cond_count=99999999999999999999&var_count=-5",
		"cond_count=3&c2_rollout=-0.5&action=remove_condition_99999",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, query string) {
		v, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		form := filterFormFrom(v, nil)
		applyFormAction(form, v.Get("action"))
		raw, err := form.filters()
		if err != nil {
			var fe *controlplane.Error
			if !errors.As(err, &fe) || fe.Kind != controlplane.Invalid || fe.Attr == "" || fe.Detail == "" {
				t.Fatalf("filters() = %v, want a form error naming its field", err)
			}
			return
		}
		var out struct {
			Groups []struct {
				Rollout *float64 `json:"rollout_percentage"`
			} `json:"groups"`
			Multivariate *struct {
				Variants []struct {
					Rollout float64 `json:"rollout_percentage"`
				} `json:"variants"`
			} `json:"multivariate"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("filters() built %s: %v", raw, err)
		}
		inRange := func(p float64) bool { return !math.IsNaN(p) && p >= 0 && p <= 100 }
		for _, g := range out.Groups {
			if g.Rollout != nil && !inRange(*g.Rollout) {
				t.Fatalf("a condition's rollout %v was accepted", *g.Rollout)
			}
		}
		if out.Multivariate != nil {
			for _, vr := range out.Multivariate.Variants {
				if !inRange(vr.Rollout) {
					t.Fatalf("a variant's percentage %v was accepted", vr.Rollout)
				}
			}
		}
	})
}

// FuzzParseProperties: the flag page's test properties, a JSON object or key=value lines,
// are read or refused with a message, never a panic.
func FuzzParseProperties(f *testing.F) {
	for _, seed := range []string{`{"email": "a@b.c"}`, "plan=pro\ncountry=FR", "no equals sign", `{"a":`, "\x00=\xff", `[]`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseProperties(s)
		if err == nil && m == nil {
			t.Fatalf("parseProperties(%q) = nil, nil", s)
		}
	})
}

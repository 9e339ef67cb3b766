package controlplane

import (
	"encoding/json"
	"strings"

	"github.com/flagedge/flagedge/shared/flags"
)

// Which arm of a release plan an exposure ($feature_flag_called) puts its user in. A plan's
// control arm must hold only users who could have been treated: on a flag with property
// filters, users who match no condition answer false too, and counting them would compare
// the treated with a different population. So a false answer is control only when the user
// is known to be eligible — they match a condition but fall outside its rollout.
//
// PostHog's SDKs send the flag's reason with the exposure ($feature_flag_reason: the /flags
// answer's reason description, "Out of rollout bound", or its code, out_of_rollout_bound,
// as posthog-node falls back to; flagedge's /flags?v=2 answers both). When the reason is
// absent or says nothing about eligibility ("Evaluated locally", from an SDK's local
// evaluation), the control plane evaluates the flag for the user's stored properties
// (postgres, at ingestion); when that cannot decide either, the exposure is counted in no
// arm, and the plan shows how many were (PlanTally.Undecided: exposures of users not
// decided, counted once per user per batch).

// ExposureClass is what an exposure says of its user's arm.
type ExposureClass int

// Exposure classes.
const (
	ExposureNone       ExposureClass = iota // not an answer of the flag (no response, an error): not counted
	ExposureTreatment                       // true, or a variant of a multivariate flag
	ExposureControl                         // false, and the user is eligible
	ExposureIneligible                      // false because the user matches no condition (or the flag is off)
	ExposureUnknown                         // false, and the reason does not say whether the user is eligible
)

// ClassifyExposure reads an exposure's $feature_flag_response and $feature_flag_reason.
// Eligibility of a false answer comes from the reason alone here: out_of_rollout_bound is
// control; the reasons of users outside every condition (no_condition_match, no_group_type,
// a disabled flag, a holdout) are ineligible; anything else is unknown.
func ClassifyExposure(response json.RawMessage, reason string) ExposureClass {
	var v any
	if json.Unmarshal(response, &v) != nil {
		return ExposureNone
	}
	switch v := v.(type) {
	case bool:
		if v {
			return ExposureTreatment
		}
	case string:
		switch v {
		case "", "false":
		default: // "true", or a variant's key
			return ExposureTreatment
		}
	default: // null (the flag was missing or failed), numbers, objects
		return ExposureNone
	}
	switch strings.ToLower(strings.TrimSpace(reason)) {
	case "out_of_rollout_bound", "out of rollout bound":
		return ExposureControl
	case "no_condition_match", "no matching condition set", "no_group_type", "no group type",
		"disabled", "flag_disabled", "feature flag is disabled", "holdout_condition_value", "holdout condition value":
		return ExposureIneligible
	}
	return ExposureUnknown
}

// EligibleFor reads the reason the control plane's own evaluation of the flag gave a user: a
// user whose properties match a condition (inside its rollout or not) is eligible; one who
// matches none is not; a failed evaluation (a property the conditions read is not stored)
// decides nothing (ok false).
func EligibleFor(r *flags.Result) (eligible, ok bool) {
	if r.Failed {
		return false, false
	}
	switch r.Reason {
	case flags.ReasonOutOfRolloutBound, flags.ReasonConditionMatch:
		return true, true
	case flags.ReasonNoConditionMatch, flags.ReasonNoGroupType, flags.ReasonDisabled:
		return false, true
	}
	return false, false
}

// HasPropertyFilters reports whether a flag's condition groups filter on properties: only
// then may a false answer come from a user who is not eligible.
func HasPropertyFilters(filters json.RawMessage) bool {
	f, err := flags.ParseFilters(filters)
	if err != nil {
		return true // decide per user
	}
	for _, g := range f.Groups {
		if len(g.Properties) > 0 {
			return true
		}
	}
	return false
}

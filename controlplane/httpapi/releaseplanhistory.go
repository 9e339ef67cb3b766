package httpapi

import (
	"net/http"
	"strconv"

	"github.com/flagedge/flagedge/controlplane"
)

// planPointJSON is a point of a guardrail's history: the arms and the change as the plan
// showed them at an evaluation.
type planPointJSON struct {
	At         timeJSON    `json:"at"`
	Step       int         `json:"step"`
	Control    armJSON     `json:"control"`
	Treatment  armJSON     `json:"treatment"`
	Change     *changeJSON `json:"change"`
	Regression bool        `json:"regression"`
}

// wantsHistory reads ?history=: the guardrails' histories are up to
// controlplane.MaxPlanPoints points each, too many to send to every caller of the GET.
func wantsHistory(r *http.Request) (bool, error) {
	raw := r.URL.Query().Get("history")
	if raw == "" {
		return false, nil
	}
	want, err := strconv.ParseBool(raw)
	if err != nil {
		return false, controlplane.FieldError("history", "invalid_input", "history must be true or false.")
	}
	return want, nil
}

// addHistory adds each guardrail's history to the plan's answer.
func (s *Server) addHistory(r *http.Request, p *controlplane.ReleasePlan, out *releasePlanJSON) error {
	history, err := s.cfg.ReleasePlans.FindReleasePlanHistory(r.Context(), p.ProjectID, p.ID)
	if err != nil {
		return err
	}
	for g := range out.Guardrails {
		points := []planPointJSON{}
		if g < len(history) {
			for _, pt := range history[g] {
				pj := planPointJSON{At: timeJSON(pt.At), Step: pt.Step, Regression: pt.Regression,
					Control:   armJSON{Users: pt.Control.Users, Mean: pt.Control.Mean},
					Treatment: armJSON{Users: pt.Treatment.Users, Mean: pt.Treatment.Mean}}
				if pt.Ready {
					pj.Change = &changeJSON{Relative: pt.Relative, Estimate: pt.Estimate, Lower: pt.Lower, Upper: pt.Upper}
				}
				points = append(points, pj)
			}
		}
		out.Guardrails[g].History = &points
	}
	return nil
}

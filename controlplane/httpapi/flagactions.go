package httpapi

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/flags"
)

// groupsParam reads ?groups=<json object of group type → key>.
func groupsParam(r *http.Request) (map[string]string, error) {
	raw := r.URL.Query().Get("groups")
	if raw == "" {
		return nil, nil
	}
	var in map[string]any
	if err := json.Unmarshal([]byte(raw), &in); err != nil {
		return nil, controlplane.FieldError("groups", "invalid_input", "groups must be a JSON object of group type to group key.")
	}
	if _, problem, ok := jsonTextProblem([]byte(raw)); !ok {
		return nil, controlplane.FieldError("groups", "invalid_input", problem)
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = fmt.Sprint(v)
	}
	return out, nil
}

type evaluationJSON struct {
	Value      any `json:"value"`
	Evaluation struct {
		Reason         string `json:"reason"`
		ConditionIndex *int   `json:"condition_index"`
	} `json:"evaluation"`
}

// handleEvaluationReasons answers every non-deleted flag's value and reason for a distinct id.
func (s *Server) handleEvaluationReasons(r *http.Request, c *call) (answer, error) {
	distinctID := r.URL.Query().Get("distinct_id")
	if distinctID == "" {
		return answer{}, controlplane.FieldError("distinct_id", "required", "distinct_id is required")
	}
	groups, err := groupsParam(r)
	if err != nil {
		return answer{}, err
	}
	p, err := s.cfg.Evaluator.Compile(r.Context(), c.project.ID)
	if err != nil {
		return answer{}, err
	}
	req := flags.Request{DistinctID: distinctID, Groups: groups}
	if raw := r.URL.Query().Get("person_properties"); raw != "" {
		if json.Unmarshal([]byte(raw), &req.PersonProperties) != nil || req.PersonProperties == nil {
			return answer{}, controlplane.FieldError("person_properties", "invalid_input", "person_properties must be a JSON object.")
		}
	}
	results, err := s.cfg.Evaluator.ForRequest(r.Context(), p, req)
	if err != nil {
		return answer{}, err
	}
	out := make(map[string]evaluationJSON, len(results))
	for i := range results {
		res := &results[i]
		var e evaluationJSON
		e.Value = res.Value()
		e.Evaluation.Reason = res.Reason.String()
		if res.ConditionIndex >= 0 {
			idx := res.ConditionIndex
			e.Evaluation.ConditionIndex = &idx
		}
		out[res.Key] = e
	}
	return ok(out), nil
}

// handleLocalEvaluation serves the flag definitions for SDK local evaluation: the same bytes
// and entity tag as an edge's /flags/definitions for the same snapshot.
func (s *Server) handleLocalEvaluation(r *http.Request, c *call) (answer, error) {
	return s.answerDefinitions(r, c.project)
}

// handleSDKDefinitions serves the definitions at the paths SDKs request (/flags/definitions,
// /api/feature_flag/local_evaluation): the project comes from ?token=, and the bearer is a
// personal key with feature_flag:read that reaches it, or the project's secret key.
func (s *Server) handleSDKDefinitions(r *http.Request) (answer, error) {
	token := r.URL.Query().Get("token")
	if token == "" {
		return answer{}, controlplane.Errorf(controlplane.NotAuthenticated, "no_api_key", "No project API key provided: pass the project's token as ?token=.")
	}
	project, err := s.cfg.Projects.FindProjectByToken(r.Context(), token)
	if controlplane.ErrorKind(err) == controlplane.NotFound {
		return answer{}, controlplane.Errorf(controlplane.BadCredentials, "invalid_api_key", "Project API key invalid. You can find your project API key in project settings.")
	}
	if err != nil {
		return answer{}, err
	}
	scheme, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	secret = strings.TrimSpace(secret)
	if strings.EqualFold(scheme, "Bearer") && strings.HasPrefix(secret, "phs_") {
		if subtle.ConstantTimeCompare([]byte(secret), []byte(project.SecretAPIToken)) != 1 {
			return answer{}, controlplane.Errorf(controlplane.BadCredentials, "invalid_personal_api_key", "The project secret key is invalid.")
		}
		return s.answerDefinitions(r, project)
	}
	key, err := s.authenticate(r, controlplane.ScopeFlagRead)
	if err != nil {
		return answer{}, err
	}
	if !key.Reaches(project) {
		return answer{}, controlplane.ErrPermissionDenied
	}
	return s.answerDefinitions(r, project)
}

// answerDefinitions answers the project's definitions as the edge encodes them, with their entity
// tag; a 304 without a body when If-None-Match names it.
func (s *Server) answerDefinitions(r *http.Request, project *controlplane.Project) (answer, error) {
	p, err := s.cfg.Evaluator.Compile(r.Context(), project.ID)
	if err != nil {
		return answer{}, err
	}
	body, err := p.Definitions(r.URL.Query().Has("send_cohorts"))
	if err != nil {
		return answer{}, err
	}
	etag := flags.ETag(body)
	a := encoded("application/json", body)
	if match := r.Header.Get("If-None-Match"); match != "" && flags.ETagMatches(match, etag) {
		a = noBody(http.StatusNotModified)
	}
	return a.with("ETag", etag).with("Cache-Control", "private, must-revalidate"), nil
}

// handleMyFlags answers the active flags' values for the calling user's distinct id.
func (s *Server) handleMyFlags(r *http.Request, c *call) (answer, error) {
	p, err := s.cfg.Evaluator.Compile(r.Context(), c.project.ID)
	if err != nil {
		return answer{}, err
	}
	results, err := s.cfg.Evaluator.ForDistinctID(r.Context(), p, c.key.User.DistinctID, nil)
	if err != nil {
		return answer{}, err
	}
	list, _, err := s.cfg.Flags.FindFlags(r.Context(), controlplane.FlagFilter{ProjectID: c.project.ID, Limit: 1 << 30})
	if err != nil {
		return answer{}, err
	}
	editable, err := s.editableFlags(r, c, list)
	if err != nil {
		return answer{}, err
	}
	type myFlag struct {
		FeatureFlag flagJSON `json:"feature_flag"`
		Value       any      `json:"value"`
	}
	out := []myFlag{}
	for _, f := range list {
		if !f.Active {
			continue
		}
		if i := p.Snapshot.Lookup(f.Key); i >= 0 {
			out = append(out, myFlag{FeatureFlag: newFlagJSON(f, editable[f.ID]), Value: results[i].Value()})
		}
	}
	return ok(out), nil
}

// handleBlastRadius counts the persons (or groups) a condition would reach.
func (s *Server) handleBlastRadius(r *http.Request, c *call) (answer, error) {
	f, err := decodeObject(r)
	if err != nil {
		return answer{}, err
	}
	var condition json.RawMessage
	if err := f.object("condition", &condition); err != nil {
		return answer{}, err
	}
	if condition == nil {
		return answer{}, controlplane.FieldError("condition", "required", "This field is required.")
	}
	var groupTypeIndex *int64
	if raw, ok := f["group_type_index"]; ok && !isNull(raw) {
		if err := decode(f, "group_type_index", &groupTypeIndex, "a group type index (0 to 4)"); err != nil {
			return answer{}, err
		}
		if *groupTypeIndex < 0 || *groupTypeIndex > 4 {
			return answer{}, controlplane.FieldError("group_type_index", "invalid_input", "A group type index is 0 to 4.")
		}
	}
	var key *string
	if err := f.str("key", &key); err != nil {
		return answer{}, err
	}
	p, err := s.cfg.Evaluator.Compile(r.Context(), c.project.ID)
	if err != nil {
		return answer{}, err
	}
	var gti *int
	if groupTypeIndex != nil {
		i := int(*groupTypeIndex)
		gti = &i
	}
	flagKey := ""
	if key != nil {
		flagKey = *key
	}
	affected, total, err := s.cfg.Evaluator.BlastRadius(r.Context(), p, condition, gti, flagKey)
	if err != nil {
		return answer{}, err
	}
	return ok(map[string]int{"users_affected": affected, "total_users": total}), nil
}

// handleStaticCohortForFlag creates a static cohort of every stored person for whom the flag
// (or one of its variants) is enabled now.
func (s *Server) handleStaticCohortForFlag(r *http.Request, c *call) (answer, error) {
	flag, err := s.flagFromPath(r, c)
	if err != nil {
		return answer{}, err
	}
	f, err := decodeObject(r)
	if err != nil {
		return answer{}, err
	}
	var variant *string
	if err := f.str("key", &variant); err != nil {
		return answer{}, err
	}
	p, err := s.cfg.Evaluator.Compile(r.Context(), c.project.ID)
	if err != nil {
		return answer{}, err
	}
	index := p.Snapshot.Lookup(flag.Key)
	if index < 0 || flag.Deleted {
		return answer{}, controlplane.ErrNotFound
	}
	parsed, err := flags.ParseFilters(flag.Filters)
	if err != nil {
		return answer{}, err
	}
	if parsed.AggregationGroupTypeIndex != nil {
		return answer{}, controlplane.FieldError("feature_flag", "invalid_input", "Static cohorts hold persons: this flag is aggregated by groups.")
	}
	name := fmt.Sprintf("Users with feature flag %s enabled at %s", flag.Key, time.Now().UTC().Format("2006-01-02 15:04:05"))
	if variant != nil {
		name = fmt.Sprintf("Users with feature flag %s variant %s at %s", flag.Key, *variant, time.Now().UTC().Format("2006-01-02 15:04:05"))
	}
	cohort, err := s.cfg.Cohorts.CreateStaticCohort(r.Context(), c.project.ID, flag.ID, name, func(yield func([]int64) error) error {
		var ids []int64
		err := s.cfg.Evaluator.EachPersonResult(r.Context(), c.project.ID, p.Snapshot, func(person *controlplane.StoredPersonRow, results []flags.Result) error {
			res := &results[index]
			if res.Enabled && (variant == nil || res.Variant == *variant) {
				ids = append(ids, person.ID)
			}
			if len(ids) >= 1000 {
				err := yield(ids)
				ids = ids[:0]
				return err
			}
			return nil
		})
		if err != nil || len(ids) == 0 {
			return err
		}
		return yield(ids)
	})
	if err != nil {
		return answer{}, err
	}
	return ok(map[string]any{"cohort": newCohortJSON(cohort)}), nil
}

// handleDashboard gives the flag its usage dashboard (once) and answers the flag.
func (s *Server) handleDashboard(r *http.Request, c *call) (answer, error) {
	id, err := flagIDFromPath(r)
	if err != nil {
		return answer{}, err
	}
	flag, err := s.cfg.Dashboards.EnsureUsageDashboard(r.Context(), c.project.ID, id)
	if err != nil {
		return answer{}, err
	}
	return s.answerWrittenFlag(r, c, flag, http.StatusOK)
}

// handleEnrichUsageDashboard turns on enriched analytics for the flag (idempotent).
func (s *Server) handleEnrichUsageDashboard(r *http.Request, c *call) (answer, error) {
	id, err := flagIDFromPath(r)
	if err != nil {
		return answer{}, err
	}
	on := true
	flag, err := s.cfg.Flags.UpdateFlag(r.Context(), c.project.ID, id, controlplane.FlagUpdate{HasEnrichedAnalytics: &on})
	if err != nil {
		return answer{}, err
	}
	return s.answerWrittenFlag(r, c, flag, http.StatusOK)
}

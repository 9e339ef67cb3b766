package console

import (
	"encoding/json"
	"fmt"
	"html/template"
	"sort"
	"strings"
	"time"
)

// The API's answers, as the pages read them.

// listOf is the API's paginated envelope.
type listOf[T any] struct {
	Count   int     `json:"count"`
	Next    *string `json:"next"`
	Results []T     `json:"results"`
}

type userView struct {
	ID        int64  `json:"id"`
	UUID      string `json:"uuid"`
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	Email     string `json:"email"`
}

// Name is the user's name for display, the email when unnamed.
func (u userView) Name() string {
	if n := strings.TrimSpace(u.FirstName + " " + u.LastName); n != "" {
		return n
	}
	return u.Email
}

type projectView struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	APIToken   string `json:"api_token"`
	Timezone   string `json:"timezone"`
	GroupTypes []struct {
		GroupType string `json:"group_type"`
		Index     int    `json:"group_type_index"`
	} `json:"group_types"`
}

type flagView struct {
	ID                         int64           `json:"id"`
	Key                        string          `json:"key"`
	Name                       string          `json:"name"`
	Filters                    json.RawMessage `json:"filters"`
	Deleted                    bool            `json:"deleted"`
	Active                     bool            `json:"active"`
	CreatedBy                  *userView       `json:"created_by"`
	CreatedAt                  time.Time       `json:"created_at"`
	UpdatedAt                  time.Time       `json:"updated_at"`
	Version                    int             `json:"version"`
	LastModifiedBy             *userView       `json:"last_modified_by"`
	RolloutPercentage          *float64        `json:"rollout_percentage"`
	EnsureExperienceContinuity bool            `json:"ensure_experience_continuity"`
	CanEdit                    bool            `json:"can_edit"`
	Tags                       []string        `json:"tags"`
	LastCalledAt               time.Time       `json:"last_called_at"` // zero: never
	EvaluationCounts           struct {
		Day   int64 `json:"1d"`
		Week  int64 `json:"7d"`
		Month int64 `json:"30d"`
	} `json:"evaluation_counts"`
	Stale bool `json:"stale"`
}

// Summary describes the flag's release conditions in a line.
func (f flagView) Summary() string {
	fl, err := parseFilterForm(f.Filters)
	if err != nil {
		return "Custom filters"
	}
	var parts []string
	who := "users"
	if fl.GroupTypeIndex != "" {
		who = "groups"
	}
	switch len(fl.Conditions) {
	case 0:
		parts = append(parts, "No release conditions")
	case 1:
		c := fl.Conditions[0]
		pct := "100%"
		if c.Rollout != "" {
			pct = c.Rollout + "%"
		}
		if len(c.Properties) == 0 {
			parts = append(parts, pct+" of all "+who)
		} else {
			var props []string
			for _, p := range c.Properties {
				props = append(props, p.Describe())
			}
			parts = append(parts, pct+" of "+who+" where "+strings.Join(props, " and "))
		}
	default:
		parts = append(parts, fmt.Sprintf("%d release conditions", len(fl.Conditions)))
	}
	if n := len(fl.Variants); n > 0 {
		parts = append(parts, fmt.Sprintf("%d variants", n))
	}
	return strings.Join(parts, " · ")
}

type activityView struct {
	ID   string `json:"id"`
	User *struct {
		FirstName string `json:"first_name"`
		Email     string `json:"email"`
	} `json:"user"`
	Activity string `json:"activity"`
	ItemID   string `json:"item_id"`
	Detail   struct {
		Name    string `json:"name"`
		Changes []struct {
			Action string          `json:"action"`
			Field  string          `json:"field"`
			Before json.RawMessage `json:"before"`
			After  json.RawMessage `json:"after"`
		} `json:"changes"`
	} `json:"detail"`
	CreatedAt time.Time `json:"created_at"`
}

// Who names the user of an activity entry.
func (a activityView) Who() string {
	if a.User == nil {
		return "System"
	}
	if a.User.FirstName != "" {
		return a.User.FirstName
	}
	return a.User.Email
}

type roleView struct {
	ID                      string `json:"id"`
	Name                    string `json:"name"`
	FeatureFlagsAccessLevel int    `json:"feature_flags_access_level"`
}

// Level names the role's flag access level.
func (r roleView) Level() string {
	if r.FeatureFlagsAccessLevel == 21 {
		return "Can view"
	}
	return "Can edit"
}

type roleAccessView struct {
	ID      int64     `json:"id"`
	Role    roleView  `json:"role"`
	AddedAt time.Time `json:"added_at"`
}

type annotationView struct {
	ID         int64      `json:"id"`
	Content    string     `json:"content"`
	DateMarker *time.Time `json:"date_marker"`
	Scope      string     `json:"scope"`
	Deleted    bool       `json:"deleted"`
	CreatedBy  *userView  `json:"created_by"`
	CreatedAt  time.Time  `json:"created_at"`
}

type keyView struct {
	ID          int64      `json:"id"`
	Label       string     `json:"label"`
	Value       string     `json:"value"`
	MaskValue   string     `json:"mask_value"`
	Scopes      []string   `json:"scopes"`
	ScopedTeams []int64    `json:"scoped_teams"`
	CreatedAt   time.Time  `json:"created_at"`
	LastUsedAt  *time.Time `json:"last_used_at"`
}

type memberView struct {
	User        userView  `json:"user"`
	Level       int       `json:"level"`
	JoinedAt    time.Time `json:"joined_at"`
	HasPassword bool      `json:"has_password"`
}

type eventView struct {
	UUID       string          `json:"uuid"`
	Event      string          `json:"event"`
	DistinctID string          `json:"distinct_id"`
	Properties json.RawMessage `json:"properties"`
	Timestamp  time.Time       `json:"timestamp"`
}

type personView struct {
	ID          int64          `json:"id"`
	UUID        string         `json:"uuid"`
	DistinctIDs []string       `json:"distinct_ids"`
	Properties  map[string]any `json:"properties"`
	CreatedAt   time.Time      `json:"created_at"`
}

// property is one key and value for a properties table.
type property struct {
	Key, Value string
}

// sortedProperties lists properties by key, values in their JSON form.
func sortedProperties(m map[string]any) []property {
	out := make([]property, 0, len(m))
	for k, v := range m {
		out = append(out, property{Key: k, Value: jsonText(v)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// jsonText is a value's text: strings as they are, the rest as compact JSON.
func jsonText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

var funcs = template.FuncMap{
	"ago": func(t time.Time) string {
		d := time.Since(t)
		switch {
		case d < time.Minute:
			return "just now"
		case d < time.Hour:
			return fmt.Sprintf("%d min ago", int(d.Minutes()))
		case d < 24*time.Hour:
			return fmt.Sprintf("%d h ago", int(d.Hours()))
		case d < 30*24*time.Hour:
			return fmt.Sprintf("%d days ago", int(d.Hours()/24))
		}
		return t.UTC().Format("2 Jan 2006")
	},
	"datetime": func(t time.Time) string { return t.UTC().Format("2 Jan 2006 15:04 UTC") },
	"isotime":  func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"props": func(raw json.RawMessage) []property {
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return sortedProperties(m)
	},
	"propmap":  sortedProperties,
	"join":     strings.Join,
	"add":      func(a, b int) int { return a + b },
	"initials": initials,
}

// initials are up to two letters for an avatar.
func initials(s string) string {
	s, _, _ = strings.Cut(s, "@")
	var out []rune
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '.' || r == '_' || r == '-' }) {
		out = append(out, []rune(strings.ToUpper(w))[0])
		if len(out) == 2 {
			break
		}
	}
	return string(out)
}

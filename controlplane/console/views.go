package console

import (
	"encoding/json"
	"fmt"
	"html/template"
	"sort"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// What the pages show beyond the domain's types: a flag with whether the user may change it,
// role levels by name, persons' properties as a map, a new key with its secret.

// flagView is a flag as the user sees it.
type flagView struct {
	*controlplane.Flag
	CanEdit bool
	// LastCalledAt (zero: never), EvaluationCounts and Stale are the flag's usage at the edges.
	LastCalledAt     time.Time
	EvaluationCounts evaluationCounts
	Stale            bool
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

// activityEntry is an activity log entry as the timeline shows it: who did what, when, and
// its changes described.
type activityEntry struct {
	Who      string
	Activity string
	// Via names what made the change for Who, such as a scheduled change; empty for their own.
	Via       string
	CreatedAt time.Time
	Changes   []changeView
}

func newActivityEntry(a *controlplane.Activity) activityEntry {
	e := activityEntry{Who: "System", Activity: a.Activity, CreatedAt: a.CreatedAt}
	if t, ok := a.Detail.Trigger.(map[string]any); ok && t["job_type"] == controlplane.JobScheduledChange {
		e.Via = fmt.Sprintf("scheduled change #%v", t["job_id"])
	}
	if a.User != nil {
		e.Who = a.User.FirstName
		if e.Who == "" {
			e.Who = a.User.Email
		}
	}
	for _, ch := range a.Detail.Changes {
		e.Changes = append(e.Changes, describeChange(ch.Field, ch.Action, jsonOf(ch.Before), jsonOf(ch.After)))
	}
	return e
}

// roleView is a role.
type roleView struct{ *controlplane.Role }

// Level names the role's flag access level.
func (r roleView) Level() string {
	if r.FeatureFlagsAccessLevel == controlplane.AccessLevelView {
		return "Can view"
	}
	return "Can edit"
}

// roleAccessView is a role's access to a flag.
type roleAccessView struct {
	*controlplane.RoleAccess
	Role roleView
}

// newKeyView is a key just issued, with its secret (shown once).
type newKeyView struct {
	*controlplane.PersonalKey
	Value string
}

// memberView is a member with their PostHog membership level (1 member, 8 admin).
type memberView struct {
	*controlplane.Member
	Level int
}

// personView is a person with their properties decoded.
type personView struct {
	*controlplane.Person
	Properties map[string]any
}

func newPersonView(p *controlplane.Person) personView {
	v := personView{Person: p}
	_ = json.Unmarshal(p.Properties, &v.Properties) // stored as a JSON object
	return v
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
	"propmap":   sortedProperties,
	"join":      strings.Join,
	"add":       func(a, b int) int { return a + b },
	"hasPrefix": strings.HasPrefix,
	"initials":  initials,
	// lag is how far behind a queue whose oldest entry was queued at t is, in seconds while
	// under a minute: an operator watching a destination catch up reads it in seconds.
	"lag": func(t time.Time) string {
		switch d := time.Since(t); {
		case d < time.Minute:
			return fmt.Sprintf("%d s", int(max(d, 0).Seconds()))
		case d < time.Hour:
			return fmt.Sprintf("%d min", int(d.Minutes()))
		case d < 48*time.Hour:
			return fmt.Sprintf("%d h", int(d.Hours()))
		default:
			return fmt.Sprintf("%d days", int(d.Hours()/24))
		}
	},
	// expiry is how long a policy's requests wait, in days when whole.
	"expiry": func(d time.Duration) string {
		if d%(24*time.Hour) == 0 {
			return fmt.Sprintf("%d days", d/(24*time.Hour))
		}
		return d.String()
	},
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

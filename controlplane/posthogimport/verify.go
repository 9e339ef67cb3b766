package posthogimport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane/flagsascode"
)

// Endpoint is a /flags API and the project token (phc_…) it is asked with: the source's
// (PostHog's app or capture host) or the target's edge.
type Endpoint struct {
	URL   string
	Token string
}

// Difference is one flag that answered differently for one synthetic user.
type Difference struct {
	DistinctID     string
	Flag           string
	Source, Target string
}

// Verification is what Verify found.
type Verification struct {
	// Compared counts the (user, flag) answers the source gave and the target was compared on.
	Compared int
	// Differences are the answers that differ.
	Differences []Difference
}

// Verify asks both endpoints' /flags?v=2 for n synthetic users and returns every flag whose
// answer (enabled and variant) differs. The users carry the person properties the flags and
// cohorts of state use, each with one of the values the filters name or without it, so that
// every condition is met by some users and missed by others. Every other user, while they
// last, is one of members (distinct ids of static cohorts' members), so that membership is
// compared too. Flags listed in skip (those imported inactive on purpose) are not compared.
func Verify(ctx context.Context, state *flagsascode.State, n int, source, target Endpoint, members, skip []string) (*Verification, error) {
	props := usedProperties(state)
	c := &http.Client{Timeout: 30 * time.Second}
	v := &Verification{}
	for i := range n {
		id := fmt.Sprintf("flagedge-verify-%d", i)
		if i%2 == 1 && i/2 < len(members) {
			id = members[i/2]
		}
		person := syntheticPerson(props, i)
		a, err := askFlags(ctx, c, source, id, person)
		if err != nil {
			return v, fmt.Errorf("the source: %w", err)
		}
		b, err := askFlags(ctx, c, target, id, person)
		if err != nil {
			return v, fmt.Errorf("the target: %w", err)
		}
		for _, key := range sortedFlagKeys(state) {
			if slices.Contains(skip, key) {
				continue
			}
			if _, ok := a[key]; ok {
				v.Compared++
			}
			if a[key] != b[key] {
				v.Differences = append(v.Differences, Difference{DistinctID: id, Flag: key, Source: a[key], Target: b[key]})
			}
		}
	}
	return v, nil
}

func sortedFlagKeys(s *flagsascode.State) []string {
	keys := make([]string, 0, len(s.Flags))
	for k := range s.Flags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// usedProperties returns, by key, the values of the person properties the state's flags
// and cohorts test.
func usedProperties(s *flagsascode.State) map[string][]any {
	out := map[string][]any{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if key, ok := x["key"].(string); ok && x["type"] == "person" && !strings.HasPrefix(key, "$feature_enrollment/") {
				switch val := x["value"].(type) {
				case []any:
					out[key] = append(out[key], val...)
				case nil:
					out[key] = append(out[key], "set")
				default:
					out[key] = append(out[key], val)
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	for _, f := range s.Flags {
		walk(f.Filters)
	}
	for _, co := range s.Cohorts {
		walk(co.Filters)
	}
	return out
}

// syntheticPerson gives user i, for every property, one of its values or none, spread so
// that the combinations vary from user to user.
func syntheticPerson(props map[string][]any, i int) map[string]any {
	person := map[string]any{}
	for key, values := range props {
		h := fnv.New32a()
		_, _ = h.Write([]byte(key))
		choice := (i + int(h.Sum32()%97)) % (len(values) + 1)
		if choice < len(values) {
			person[key] = values[choice]
		}
	}
	return person
}

// askFlags asks one endpoint's /flags?v=2 for a user and returns each flag's answer as
// "false", "true" or the variant.
func askFlags(ctx context.Context, c *http.Client, e Endpoint, distinctID string, person map[string]any) (map[string]string, error) {
	body, err := json.Marshal(map[string]any{"token": e.Token, "distinct_id": distinctID, "person_properties": person})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(e.URL, "/")+"/flags/?v=2", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST /flags?v=2: %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	var answer struct {
		Flags map[string]struct {
			Enabled bool    `json:"enabled"`
			Variant *string `json:"variant"`
		} `json:"flags"`
		Errors bool `json:"errorsWhileComputingFlags"`
	}
	if err := json.Unmarshal(data, &answer); err != nil {
		return nil, fmt.Errorf("POST /flags?v=2: not a /flags answer: %w", err)
	}
	if answer.Errors {
		return nil, fmt.Errorf("POST /flags?v=2: errorsWhileComputingFlags for %s", distinctID)
	}
	out := map[string]string{}
	for key, f := range answer.Flags {
		switch {
		case f.Variant != nil:
			out[key] = *f.Variant
		default:
			out[key] = fmt.Sprint(f.Enabled)
		}
	}
	return out, nil
}

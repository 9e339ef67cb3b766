// Package posthogimport brings a PostHog project into flagedge: it reads feature flags,
// cohorts, early access features and annotations over PostHog's REST API, translates them to
// a flags as code State (keys kept, so PostHog's bucketing gives every user the same
// variant), and writes them through flagsascode.Apply, so an import is idempotent and can be
// re-run to sync. What flagedge cannot serve exactly is never changed silently: the flags
// that need it are imported inactive and reported.
package posthogimport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Source reads one PostHog project over its REST API with a personal API key (phx_…).
type Source struct {
	base    *url.URL
	key     string
	project string
	http    *http.Client
	// MinInterval is the least time between two requests: PostHog allows 480 requests a
	// minute per key, so the default (130 ms, about 460 a minute) stays under it.
	MinInterval time.Duration
	// MaxRetries is how many times one request is retried after a 429 or 503.
	MaxRetries int
	// OnPage, when set, is told of every page read: the path and how many objects it held.
	OnPage func(path string, objects int)

	mu   sync.Mutex
	last time.Time
}

// NewSource returns a reader of project at PostHog's API baseURL (e.g. https://us.posthog.com).
func NewSource(baseURL, key, project string) (*Source, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--from-url %q is not an http(s) URL", baseURL)
	}
	return &Source{base: u, key: key, project: url.PathEscape(project), http: &http.Client{Timeout: 60 * time.Second},
		MinInterval: 130 * time.Millisecond, MaxRetries: 10}, nil
}

// pace waits until MinInterval has passed since the previous request.
func (s *Source) pace(ctx context.Context) error {
	s.mu.Lock()
	next := s.last.Add(s.MinInterval)
	now := time.Now()
	if next.Before(now) {
		next = now
	}
	s.last = next
	s.mu.Unlock()
	return sleep(ctx, time.Until(next))
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// maxRetryAfter caps the wait one Retry-After may ask for.
const maxRetryAfter = 5 * time.Minute

// retryAfter reads a Retry-After header (seconds or an HTTP date), at most maxRetryAfter;
// without one, a second.
func retryAfter(h string) time.Duration {
	if secs, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && secs >= 0 {
		return min(time.Duration(secs)*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(h); err == nil {
		return min(time.Until(t), maxRetryAfter)
	}
	return time.Second
}

// get reads one URL of the source into out, honouring 429 and 503 with Retry-After.
func (s *Source) get(ctx context.Context, u string, out any) error {
	for attempt := 0; ; attempt++ {
		if err := s.pace(ctx); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+s.key)
		resp, err := s.http.Do(req)
		if err != nil {
			return fmt.Errorf("PostHog: %w", err)
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("PostHog: GET %s: %w", u, err)
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			if err := json.Unmarshal(data, out); err != nil {
				return fmt.Errorf("PostHog: GET %s: the answer is not PostHog's: %w", u, err)
			}
			return nil
		case (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && attempt < s.MaxRetries:
			if err := sleep(ctx, retryAfter(resp.Header.Get("Retry-After"))); err != nil {
				return err
			}
		default:
			return fmt.Errorf("PostHog: GET %s: %d: %s", u, resp.StatusCode, strings.TrimSpace(string(data)))
		}
	}
}

// pageSize is how many objects one page asks for: PostHog's default and largest useful page.
const pageSize = 100

// page is PostHog's list answer.
type page[T any] struct {
	Next    *string `json:"next"`
	Results []T     `json:"results"`
}

// list reads every page of a project list endpoint (path with its query, without limit),
// following next, and calls each with every page's objects.
func list[T any](ctx context.Context, s *Source, path string, each func([]T) error) error {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	u := fmt.Sprintf("%s/api/projects/%s%s%slimit=%d&offset=0", s.base, s.project, path, sep, pageSize)
	for u != "" {
		var p page[T]
		if err := s.get(ctx, u, &p); err != nil {
			return err
		}
		if s.OnPage != nil {
			s.OnPage(path, len(p.Results))
		}
		if err := each(p.Results); err != nil {
			return err
		}
		u = ""
		if p.Next != nil && *p.Next != "" {
			next, err := s.base.Parse(*p.Next)
			if err != nil || next.Host != s.base.Host {
				return fmt.Errorf("PostHog: a next page %q outside %s", *p.Next, s.base.Host)
			}
			u = next.String()
		}
	}
	return nil
}

// listAll reads every page of path.
func listAll[T any](ctx context.Context, s *Source, path string) ([]T, error) {
	var all []T
	err := list(ctx, s, path, func(p []T) error { all = append(all, p...); return nil })
	return all, err
}

// Flag is a PostHog feature flag: the fields the import reads.
type Flag struct {
	ID                         int64           `json:"id"`
	Key                        string          `json:"key"`
	Name                       string          `json:"name"`
	Filters                    json.RawMessage `json:"filters"`
	Active                     bool            `json:"active"`
	Deleted                    bool            `json:"deleted"`
	Tags                       []string        `json:"tags"`
	EvaluationTags             []string        `json:"evaluation_tags"`
	EvaluationRuntime          string          `json:"evaluation_runtime"`
	EnsureExperienceContinuity bool            `json:"ensure_experience_continuity"`
	BucketingIdentifier        *string         `json:"bucketing_identifier"`
	HasEncryptedPayloads       bool            `json:"has_encrypted_payloads"`
}

// Cohort is a PostHog cohort.
type Cohort struct {
	ID          int64           `json:"id"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Filters     json.RawMessage `json:"filters"`
	Groups      json.RawMessage `json:"groups"`
	IsStatic    bool            `json:"is_static"`
	Deleted     bool            `json:"deleted"`
	Count       *int            `json:"count"`
}

// Feature is a PostHog early access feature.
type Feature struct {
	Name             string `json:"name"`
	Description      string `json:"description"`
	Stage            string `json:"stage"`
	DocumentationURL string `json:"documentation_url"`
	FeatureFlag      *struct {
		Key string `json:"key"`
	} `json:"feature_flag"`
}

// Annotation is a PostHog annotation.
type Annotation struct {
	Content      string  `json:"content"`
	DateMarker   *string `json:"date_marker"`
	Scope        string  `json:"scope"`
	CreationType string  `json:"creation_type"`
	Deleted      bool    `json:"deleted"`
}

// Project is what the import reads from the source.
type Project struct {
	Flags       []Flag
	Cohorts     []Cohort
	Features    []Feature
	Annotations []Annotation
}

// Read reads the source project's flags, cohorts, early access features and annotations.
func (s *Source) Read(ctx context.Context) (*Project, error) {
	var p Project
	var err error
	if p.Flags, err = listAll[Flag](ctx, s, "/feature_flags/"); err != nil {
		return nil, err
	}
	if p.Cohorts, err = listAll[Cohort](ctx, s, "/cohorts/"); err != nil {
		return nil, err
	}
	if p.Features, err = listAll[Feature](ctx, s, "/early_access_feature/"); err != nil {
		return nil, err
	}
	if p.Annotations, err = listAll[Annotation](ctx, s, "/annotations/"); err != nil {
		return nil, err
	}
	return &p, nil
}

// errNotJSON is returned for filters that are not a JSON object.
var errNotJSON = errors.New("filters are not a JSON object")

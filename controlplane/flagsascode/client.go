package flagsascode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls one project's REST API with a personal API key: the reads and writes flags as
// code needs, typed, nothing more.
type Client struct {
	base    string
	key     string
	project string
	http    *http.Client
}

// NewClient returns a client of project (its id) at the control plane's API baseURL, e.g.
// https://flags.example.com; httpClient nil is a client with a 60 s timeout per request, as
// long as rollout_status's longest wait plus a margin.
func NewClient(baseURL, key, project string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: maxRolloutWait + 10*time.Second}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), key: key, project: url.PathEscape(project), http: httpClient}
}

// APIError is an answer other than a success, in the API's error shape.
type APIError struct {
	Method, Path string
	Status       int
	Code         string `json:"code"`
	Detail       string `json:"detail"`
	Attr         string `json:"attr"`
	// ChangeRequestID is, for a change that needs an approval (409 approval_required, or
	// change_request_pending when the same change already waits for one), the change request
	// that holds it.
	ChangeRequestID string `json:"change_request_id"`
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("%s %s: %d", e.Method, e.Path, e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Attr != "" {
		msg += " (" + e.Attr + ")"
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Gated reports whether the change was not made but held for approval.
func (e *APIError) Gated() bool {
	return e.Status == http.StatusConflict && (e.Code == "approval_required" || e.Code == "change_request_pending")
}

// snapshotVersionHeader names, on a flag write, the project's snapshot version holding it.
const snapshotVersionHeader = "X-Flagedge-Snapshot-Version"

// do sends one request; out (when not nil) receives a 2xx answer's body. It returns the
// write's snapshot version, 0 when the answer names none.
func (c *Client) do(ctx context.Context, method, path string, body, out any) (int64, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+"/api/projects/"+c.project+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		apiErr := &APIError{Method: method, Path: path, Status: resp.StatusCode}
		if json.Unmarshal(data, apiErr) != nil {
			apiErr.Detail = strings.TrimSpace(string(data))
		}
		return 0, apiErr
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return 0, fmt.Errorf("%s %s: the answer is not the API's: %w", method, path, err)
		}
	}
	version, _ := strconv.ParseInt(resp.Header.Get(snapshotVersionHeader), 10, 64)
	return version, nil
}

// pageSize is how many objects one list request asks for: the API's largest page.
const pageSize = 100

// list reads every page of a list endpoint.
func list[T any](ctx context.Context, c *Client, path string) ([]T, error) {
	var all []T
	for offset := 0; ; offset += pageSize {
		var page struct {
			Count   int `json:"count"`
			Results []T `json:"results"`
		}
		if _, err := c.do(ctx, http.MethodGet, fmt.Sprintf("%s?limit=%d&offset=%d", path, pageSize, offset), nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Results...)
		if len(page.Results) == 0 || len(all) >= page.Count {
			return all, nil
		}
	}
}

// apiFlag is a flag as the API shows it: the fields flags as code reads.
type apiFlag struct {
	ID                         int64           `json:"id"`
	Key                        string          `json:"key"`
	Name                       string          `json:"name"`
	Filters                    json.RawMessage `json:"filters"`
	Active                     bool            `json:"active"`
	Tags                       []string        `json:"tags"`
	EvaluationRuntime          string          `json:"evaluation_runtime"`
	EvaluationTags             []string        `json:"evaluation_tags"`
	EnsureExperienceContinuity bool            `json:"ensure_experience_continuity"`
	BucketingIdentifier        *string         `json:"bucketing_identifier"`
}

// apiCohort is a cohort as the API shows it.
type apiCohort struct {
	ID          int64           `json:"id"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Filters     json.RawMessage `json:"filters"`
	IsStatic    bool            `json:"is_static"`
	Deleted     bool            `json:"deleted"`
}

// apiFeature is an early access feature as the API shows it.
type apiFeature struct {
	ID               string `json:"id"`
	Name             string `json:"name"`
	Description      string `json:"description"`
	Stage            string `json:"stage"`
	DocumentationURL string `json:"documentation_url"`
	FeatureFlag      *struct {
		Key string `json:"key"`
	} `json:"feature_flag"`
}

const (
	flagsPath    = "/feature_flags/"
	cohortsPath  = "/cohorts/"
	featuresPath = "/early_access_feature/"
)

// created is the id of an object a POST created.
type created struct {
	ID json.RawMessage `json:"id"`
}

// RolloutStatus is rollout_status's answer: how many connected edges serve a version.
type RolloutStatus struct {
	Version int64 `json:"version"`
	Done    bool  `json:"done"`
	Live    int   `json:"live"`
	Total   int   `json:"total"`
}

// maxRolloutWait is the longest wait one rollout_status request may ask for.
const maxRolloutWait = 60 * time.Second

// CurrentVersion is the project's latest snapshot version: once the edges serve it, every
// write made before the call is live.
func (c *Client) CurrentVersion(ctx context.Context) (int64, error) {
	var edges struct {
		Current int64 `json:"current_version"`
	}
	_, err := c.do(ctx, http.MethodGet, "/edges/", nil, &edges)
	return edges.Current, err
}

// WaitLive waits until every connected edge serves version or a later one, or until ctx
// ends; it returns the last status.
func (c *Client) WaitLive(ctx context.Context, version int64) (RolloutStatus, error) {
	for {
		wait := maxRolloutWait
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d)-time.Second)
		}
		var st RolloutStatus
		_, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/rollout_status/?version=%d&timeout=%s", version, max(wait, 0).Round(time.Millisecond)), nil, &st)
		var apiErr *APIError
		switch {
		case err == nil:
			return st, nil
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusRequestTimeout:
			if ctx.Err() != nil || wait <= 0 {
				return st, fmt.Errorf("not every edge serves version %d yet: %w", version, context.DeadlineExceeded)
			}
		default:
			return st, err
		}
	}
}

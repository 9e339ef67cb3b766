package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// errNotLive is wait-for-edges' answer when the timeout passed first: exit status 1.
var errNotLive = errors.New("not every connected edge serves the version")

// maxRolloutWait is the longest wait one rollout_status request may ask for; longer waits are
// several requests.
const maxRolloutWait = 60 * time.Second

// waitForEdges asks a control plane's API until every connected edge serves a project's
// version, for CI/CD: exit status 0 when they do, 1 when the timeout passes first. It prints
// the last answer (the edges, and the laggards) as one JSON line.
func waitForEdges(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("wait-for-edges", stderr)
	apiURL := fs.String("url", envOr("FLAGEDGE_URL", "http://127.0.0.1:8000"), "the control plane's API (env FLAGEDGE_URL)")
	key := fs.String("api-key", os.Getenv("FLAGEDGE_API_KEY"), "a personal API key with project:read (env FLAGEDGE_API_KEY)")
	project := fs.String("project", "", "the project's id (required)")
	version := fs.Int64("version", 0, "the snapshot version to wait for: a write's X-Flagedge-Snapshot-Version (required)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *project == "" || *version <= 0 || *key == "" {
		return errors.New("--project, --version and --api-key (or FLAGEDGE_API_KEY) are required")
	}
	deadline := time.Now().Add(*timeout)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for {
		wait := min(time.Until(deadline), maxRolloutWait).Round(time.Millisecond)
		status, body, err := rolloutStatus(ctx, client, *apiURL, *key, *project, *version, max(wait, 0))
		if err != nil {
			return err
		}
		switch {
		case status == http.StatusOK:
			_, err := stdout.Write(body)
			return err
		case status != http.StatusRequestTimeout:
			return fmt.Errorf("rollout_status answered %d: %s", status, strings.TrimSpace(string(body)))
		case time.Until(deadline) <= 0:
			if _, err := stdout.Write(body); err != nil {
				return err
			}
			return errNotLive
		}
	}
}

// rolloutStatus makes one rollout_status request, waiting up to wait.
func rolloutStatus(ctx context.Context, client *http.Client, apiURL, key, project string, version int64, wait time.Duration) (int, []byte, error) {
	u := fmt.Sprintf("%s/api/projects/%s/rollout_status/?version=%d&timeout=%s", strings.TrimRight(apiURL, "/"),
		url.PathEscape(project), version, wait)
	ctx, cancel := context.WithTimeout(ctx, wait+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusRequestTimeout {
		var compact json.RawMessage
		if json.Unmarshal(body, &compact) == nil {
			body = append(compact, '\n')
		}
	}
	return resp.StatusCode, body, nil
}

func envOr(name, fallback string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return fallback
}

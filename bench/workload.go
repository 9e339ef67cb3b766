package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/flagedge/flagedge/shared/flags/flagstest"
)

// api is the control plane's management API, as an admin uses it.
type api struct {
	base, key string
	http      *http.Client
}

func (a *api) call(method, path string, body any, out any) error {
	_, err := a.send(method, path, body, out)
	return err
}

// send is call that also returns the answer's headers.
func (a *api) send(method, path string, body any, out any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return resp.Header, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		return resp.Header, json.Unmarshal(raw, out)
	}
	return resp.Header, nil
}

// project is the generated project the load runs against.
type project struct {
	id    int64
	token string
	flags map[string]int64 // key → id
}

// createProject creates a project holding n flags of flagstest.RealisticProject's mix
// (flagstest.RealisticProjectOf; its 50 flags for 50) and its cohort, through the REST API as
// a user would.
func createProject(a *api, name string, n int) (*project, error) {
	var p struct {
		ID       int64  `json:"id"`
		APIToken string `json:"api_token"`
	}
	if err := a.call("POST", "/api/projects/", map[string]any{"name": name}, &p); err != nil {
		return nil, err
	}
	out := &project{id: p.ID, token: p.APIToken, flags: map[string]int64{}}
	def := flagstest.RealisticProjectOf(n)
	cohortIDs := map[int64]int64{}
	for _, c := range def.Cohorts {
		var filters map[string]any
		if err := json.Unmarshal(c.Filters, &filters); err != nil {
			return nil, err
		}
		var created struct {
			ID int64 `json:"id"`
		}
		if err := a.call("POST", fmt.Sprintf("/api/projects/%d/cohorts/", p.ID), map[string]any{"name": "bench cohort", "filters": filters}, &created); err != nil {
			return nil, err
		}
		cohortIDs[c.ID] = created.ID
	}
	for _, f := range def.Flags {
		filters := string(f.Filters)
		for old, id := range cohortIDs {
			filters = strings.ReplaceAll(filters, fmt.Sprintf(`"value": %d, "operator": "in"`, old), fmt.Sprintf(`"value": %d, "operator": "in"`, id))
		}
		var body map[string]any
		if err := json.Unmarshal([]byte(`{"filters": `+filters+`}`), &body); err != nil {
			return nil, err
		}
		body["key"] = f.Key
		var created struct {
			ID int64 `json:"id"`
		}
		if err := a.call("POST", fmt.Sprintf("/api/projects/%d/feature_flags/", p.ID), body, &created); err != nil {
			return nil, err
		}
		out.flags[f.Key] = created.ID
	}
	return out, nil
}

// workload generates requests; the same seed gives the same requests.
type workload struct {
	seed      uint64
	token     string
	edge      string // host:port
	users     int
	overrides float64 // share of decide requests that carry person properties
	props     [][]byte
	ips       []string
	capture   map[string][][]byte // by "size/encoding"
}

func newWorkload(seed uint64, token, edge string, users int, overrides float64) *workload {
	rng := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	w := &workload{seed: seed, token: token, edge: edge, users: users, overrides: overrides, capture: map[string][][]byte{}}
	plans := []string{"free", "pro", "enterprise", "team"}
	countries := []string{"US", "FR", "DE", "GB", "JP", "BR"}
	for i := range 1024 {
		p, _ := json.Marshal(map[string]any{
			"email": fmt.Sprintf("user%d@%s", i, []string{"example.com", "corp.io", "mail.example.org"}[rng.IntN(3)]),
			"plan":  plans[rng.IntN(len(plans))], "age": 18 + rng.IntN(60), "country": countries[rng.IntN(len(countries))],
			"$current_url": []string{"https://shop.example.com/checkout/v2", "https://shop.example.com/", "https://shop.example.com/checkout/new"}[rng.IntN(3)],
			"signup_date":  time.Now().AddDate(0, 0, -rng.IntN(900)).Format(time.RFC3339),
			"app_version":  fmt.Sprintf("%d.%d.%d", 1+rng.IntN(3), rng.IntN(10), rng.IntN(20)),
		})
		w.props = append(w.props, p)
	}
	// Client addresses spread over public IPv4 space, which a GeoLite2 City database covers.
	for len(w.ips) < 4096 {
		a := 1 + rng.IntN(223)
		if a == 10 || a == 127 || a == 100 || a == 169 || a == 172 || a == 192 || a == 198 || a == 203 {
			continue
		}
		w.ips = append(w.ips, fmt.Sprintf("%d.%d.%d.%d", a, rng.IntN(256), rng.IntN(256), 1+rng.IntN(254)))
	}
	for _, size := range []int{1, 10, 100} {
		for _, enc := range []string{"plain", "gzip"} {
			var bodies [][]byte
			for b := range 32 {
				var events []any
				for e := range size {
					events = append(events, map[string]any{"event": []string{"$pageview", "$autocapture", "checkout_started"}[(b+e)%3],
						"distinct_id": fmt.Sprintf("user-%d-%d", seed, rng.IntN(max(users, 1))),
						"properties":  map[string]any{"$current_url": "https://shop.example.com/products/" + strconv.Itoa(e), "$lib": "bench", "n": e}})
				}
				raw, _ := json.Marshal(map[string]any{"api_key": token, "batch": events, "sent_at": time.Now().Format(time.RFC3339Nano)})
				if enc == "gzip" {
					var buf bytes.Buffer
					zw := gzip.NewWriter(&buf)
					zw.Write(raw)
					zw.Close()
					raw = buf.Bytes()
				}
				bodies = append(bodies, raw)
			}
			w.capture[fmt.Sprintf("%d/%s", size, enc)] = bodies
		}
	}
	return w
}

// decide returns the i-th decide request: distinct id i (so every request is a new user),
// or one of repeat users when repeat > 0. path is "/decide/?v=3" or "/flags/?v=2".
func (w *workload) decide(i int64, path string, repeat int) *request {
	user := i
	if repeat > 0 {
		user = i % int64(repeat)
	}
	h := mix(w.seed, uint64(i))
	var b []byte
	b = append(b, `{"api_key":"`...)
	b = append(b, w.token...)
	b = append(b, `","distinct_id":"user-`...)
	b = strconv.AppendUint(b, w.seed, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, user, 10)
	b = append(b, `","groups":{"company":"company-`...)
	b = strconv.AppendUint(b, h%500, 10)
	b = append(b, `"}`...)
	if float64(h%1000) < w.overrides*1000 {
		b = append(b, `,"person_properties":`...)
		b = append(b, w.props[h%uint64(len(w.props))]...)
	}
	b = append(b, '}')
	return &request{method: "POST", url: "http://" + w.edge + path, body: b,
		headers: [][2]string{{"Content-Type", "application/json"}, {"X-Forwarded-For", w.ips[(h>>12)%uint64(len(w.ips))]}}}
}

// captureBatch returns the i-th capture request of the given batch size and encoding.
func (w *workload) captureBatch(i int64, size int, enc string) *request {
	bodies := w.capture[fmt.Sprintf("%d/%s", size, enc)]
	r := &request{method: "POST", url: "http://" + w.edge + "/batch/", body: bodies[i%int64(len(bodies))], events: size,
		headers: [][2]string{{"Content-Type", "application/json"}, {"X-Forwarded-For", w.ips[uint64(i)%uint64(len(w.ips))]}}}
	if enc == "gzip" {
		r.url += "?compression=gzip"
		r.headers = append(r.headers, [2]string{"Content-Encoding", "gzip"})
	}
	return r
}

// mixed is what a browser SDK produces: one decide for about ten events.
func (w *workload) mixed(i int64) *request {
	if i%2 == 0 {
		return w.decide(i/2, "/decide/?v=3", 0)
	}
	return w.captureBatch(i/2, 10, "gzip")
}

func mix(seed, i uint64) uint64 {
	x := seed ^ (i * 0x9E3779B97F4A7C15)
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	return x ^ (x >> 31)
}

func hostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("not a URL: %q", raw)
	}
	return u.Host, nil
}

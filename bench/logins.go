package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The logins scenario measures what a console login flood does to the management API: the
// API's latency idle, then while 50 login attempts a second with distinct made-up emails
// come from one address, then while they come spread over 50 addresses through a trusted
// proxy (X-Forwarded-For, the control plane started with --trusted-proxies 127.0.0.1). Each
// attempt would cost a bcrypt hash; the login limits (per address, per email, concurrent
// hashes) are what keeps the API's cores free. Target: the API's p50 within 2x idle and its
// p99 under 50 ms in both floods. It needs no running flagedge: `go run ./bench --scenario
// logins`.

const (
	loginsPhase   = 20 * time.Second
	loginsPerSec  = 50
	loginsClients = 50
	// loginsAPIPause spaces the API probe's requests: a light, steady client, whose latency
	// is what a person using the API or console would see.
	loginsAPIPause = 20 * time.Millisecond
)

// loginsPhaseResult is one phase's measurements.
type loginsPhaseResult struct {
	Phase       string         `json:"phase"`
	APIRequests int            `json:"api_requests"`
	APIP50Ms    float64        `json:"api_p50_ms"`
	APIP99Ms    float64        `json:"api_p99_ms"`
	Logins      map[string]int `json:"logins,omitempty"` // by status code
	CPUSeconds  float64        `json:"controlplane_cpu_seconds"`
}

// loginsScenario is `--scenario logins`.
func loginsScenario(cfg config) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := startSelfStack(ctx, stackOptions{name: "logins", controlPlaneArgs: []string{"--trusted-proxies", "127.0.0.1"}})
	if err != nil {
		return err
	}
	defer s.close()
	projectID, _, err := s.project()
	if err != nil {
		return err
	}
	// The probe reads a project's flags: authentication, a database read, JSON.
	probe := fmt.Sprintf("%s/api/projects/%d/feature_flags/", s.controlPlaneURL(), projectID)
	var results []loginsPhaseResult
	for n, phase := range []struct {
		name  string
		flood func(i int) string // X-Forwarded-For of attempt i; nil: no flood
	}{
		{"idle", nil},
		{"50 logins/s from one address", func(int) string { return "" }},
		{"50 logins/s from 50 addresses behind a trusted proxy", func(i int) string { return fmt.Sprintf("198.51.100.%d", i%loginsClients+1) }},
		{"idle again", nil},
	} {
		progress("logins: " + phase.name)
		res, err := loginsRunPhase(s, probe, phase.name, fmt.Sprintf("flood%d", n), phase.flood)
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	md := loginsMarkdown(results)
	fmt.Print("\n" + md)
	if err := writeScenarioReport(cfg.out, "logins", "phases", results, md); err != nil {
		return err
	}
	fmt.Printf("\nreport: %s/logins.md, logins.json\n", cfg.out)
	return nil
}

// loginsRunPhase probes the API for loginsPhase while flood (when not nil) sends logins.
func loginsRunPhase(s *selfStack, probe, name, emailPrefix string, flood func(int) string) (loginsPhaseResult, error) {
	res := loginsPhaseResult{Phase: name, Logins: map[string]int{}}
	cpuBefore := processCPU(s.cp)
	deadline := time.Now().Add(loginsPhase)
	var wg sync.WaitGroup
	var mu sync.Mutex
	if flood != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / loginsPerSec)
			defer tick.Stop()
			for i := 0; time.Now().Before(deadline); i++ {
				<-tick.C
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					code := loginAttempt(s.controlPlaneURL(), flood(i), fmt.Sprintf("%s-%d@example.com", emailPrefix, i))
					mu.Lock()
					res.Logins[code]++
					mu.Unlock()
				}(i)
			}
		}()
	}
	var lat []time.Duration
	for time.Now().Before(deadline) {
		start := time.Now()
		if err := getJSON(probe, s.personalKey, nil); err != nil {
			return res, err
		}
		lat = append(lat, time.Since(start))
		time.Sleep(loginsAPIPause)
	}
	wg.Wait()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	res.APIRequests, res.APIP50Ms, res.APIP99Ms = len(lat), q(0.50), q(0.99)
	res.CPUSeconds = processCPU(s.cp) - cpuBefore
	if flood == nil {
		res.Logins = nil
	}
	return res, nil
}

// loginClient sends the flood's logins.
var loginClient = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// loginAttempt posts one console login with a wrong password and returns the status code
// (or "error").
func loginAttempt(base, forwardedFor, email string) string {
	const token = "bench-login-csrf-token-0123456789abcdef"
	form := url.Values{"email": {email}, "password": {"not the password"}, "csrf_token": {token}}
	req, err := http.NewRequest("POST", base+"/login", strings.NewReader(form.Encode()))
	if err != nil {
		return "error"
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "flagedge_login_csrf", Value: token})
	if forwardedFor != "" {
		req.Header.Set("X-Forwarded-For", forwardedFor)
	}
	resp, err := loginClient.Do(req)
	if err != nil {
		return "error"
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return strconv.Itoa(resp.StatusCode)
}

// getJSON GETs url with a personal key and decodes the answer into out (when not nil).
func getJSON(url, key string, out any) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// processCPU is the CPU time (user and system) the process has used, in seconds, from
// /proc; 0 where that cannot be read.
func processCPU(p *process) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // clock ticks; 100 a second on Linux
}

// loginsMarkdown is the scenario's table, with the targets checked against the first idle
// phase.
func loginsMarkdown(results []loginsPhaseResult) string {
	var b strings.Builder
	b.WriteString("| phase | API requests | API p50 | API p99 | logins answered | control-plane CPU |\n|---|---|---|---|---|---|\n")
	for _, r := range results {
		var logins []string
		for _, code := range slices.Sorted(maps.Keys(r.Logins)) {
			logins = append(logins, fmt.Sprintf("%s: %d", code, r.Logins[code]))
		}
		fmt.Fprintf(&b, "| %s | %d | %.2f ms | %.2f ms | %s | %.1f s |\n", r.Phase, r.APIRequests, r.APIP50Ms, r.APIP99Ms,
			strings.Join(logins, ", "), r.CPUSeconds)
	}
	idle := results[0]
	b.WriteString("\nTargets (against the first idle phase):\n\n")
	for _, r := range results[1:] {
		if r.Logins == nil {
			continue
		}
		ok := func(v bool) string {
			if v {
				return "met"
			}
			return "MISSED"
		}
		fmt.Fprintf(&b, "- %s: p50 %.2f ms <= 2 x %.2f ms: %s; p99 %.2f ms < 50 ms: %s\n", r.Phase, r.APIP50Ms, idle.APIP50Ms,
			ok(r.APIP50Ms <= 2*idle.APIP50Ms), r.APIP99Ms, ok(r.APIP99Ms < 50))
	}
	return b.String()
}

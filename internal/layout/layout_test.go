package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// module is the module path; packages are named relative to it below ("controlplane/postgres").
const module = "github.com/flagedge/flagedge"

// pkg is one package of the module as go list reports it, with module paths made relative.
type pkg struct {
	Path    string   // relative to the module ("edge/decide"), "" for none
	Imports []string // direct imports of its non-test files
	Deps    []string // every package its non-test files depend on, transitively
}

// rule is one line docs/architecture.md draws: no package that from matches may import
// (directly, or through others when deep) a package that to matches, unless allowed.
type rule struct {
	name  string
	from  func(string) bool
	to    func(string) bool
	deep  bool
	allow func(from, to string) bool
}

func under(prefixes ...string) func(string) bool {
	return func(p string) bool {
		for _, pre := range prefixes {
			if p == pre || strings.HasPrefix(p, pre+"/") {
				return true
			}
		}
		return false
	}
}

func is(paths ...string) func(string) bool {
	return func(p string) bool { return slices.Contains(paths, p) }
}

func not(f func(string) bool) func(string) bool { return func(p string) bool { return !f(p) } }

// The control plane's adapters (what wraps I/O: PostgreSQL, HTTP, gRPC, NATS) and the
// packages of its domain (pure logic over the domain's interfaces).
var (
	cpAdapters = is("controlplane/postgres", "controlplane/httpapi", "controlplane/console", "controlplane/syncserver", "controlplane/logingest",
		"controlplane/webhook", "controlplane/flagsascode", "controlplane/forward")
	cpDomain = is("controlplane", "controlplane/flageval", "controlplane/ingest", "controlplane/personview",
		"controlplane/bloomhub", "controlplane/rollout", "controlplane/loginlimit", "controlplane/scheduler",
		"controlplane/approvalwatch", "controlplane/releaser")
	testHelpers = is("internal/pgtest", "internal/pgcluster", "internal/natstest", "internal/tlstest", "geoip/geoiptest", "shared/flags/flagstest",
		"controlplane/scheduler/schedulertest", "controlplane/httpapi/httpapitest", "controlplane/postgres/postgrestest")
	harnesses = under("bench", "e2e")
)

// rules are the numbered rules of docs/architecture.md's "Dependency rules", in order.
var rules = []rule{
	{name: "1. the control plane does not depend on the edge", from: under("controlplane"), to: under("edge"), deep: true},
	{name: "1. the edge does not depend on the control plane", from: under("edge"), to: under("controlplane"), deep: true},
	{name: "2. shared, geoip and internal depend on neither program nor the harnesses",
		from: under("shared", "geoip", "internal"), to: under("controlplane", "edge", "bench", "e2e"), deep: true},
	{name: "3. the domain package controlplane imports, of the module, only shared/flags and shared/confseq",
		from: is("controlplane"), to: not(is("", "shared/flags", "shared/confseq"))},
	{name: "4. the control plane's domain packages depend on no adapter",
		from: cpDomain, to: cpAdapters, deep: true},
	{name: "5. the control plane's adapters do not import each other: concrete types meet in cmd",
		from: cpAdapters, to: cpAdapters, deep: true, allow: func(from, to string) bool { return from == to }},
	{name: "6. on the edge, decide and capture do not depend on each other",
		from: is("edge/decide"), to: is("edge/capture"), deep: true},
	{name: "6. on the edge, capture does not depend on decide",
		from: is("edge/capture"), to: is("edge/decide"), deep: true},
	{name: "7. only the edge uses geoip", from: not(under("edge", "geoip", "bench", "e2e")), to: is("geoip"), deep: true},
	{name: "8. test helpers are imported only by tests, the harnesses and each other",
		from: not(func(p string) bool { return harnesses(p) || testHelpers(p) }), to: testHelpers, deep: true},
}

// thirdParty confines libraries to the packages that wrap them (rule 9): a module path
// prefix and the packages that may import it directly.
var thirdParty = []struct {
	lib   string
	users func(string) bool
}{
	{"github.com/jackc/pgx", is("controlplane/postgres", "internal/pgtest", "bench")},
	{"github.com/valyala/fasthttp", under("edge", "bench")},
	{"github.com/fasthttp/router", is("edge/httpapi")},
	{"github.com/dgraph-io/ristretto", is("edge/cache")},
	{"github.com/oschwald/geoip2-golang", is("geoip")},
	{"github.com/bits-and-blooms/bloom", is("shared/bloomkeys", "controlplane/bloomhub", "edge/bloomset")},
	{"go.yaml.in/yaml", is("controlplane/flagsascode")},
	{"github.com/nats-io/nats.go", is("shared/eventlog", "controlplane/logingest", "edge/capture", "internal/natstest", "bench")},
}

// violations lists every import of pkgs that breaks a rule.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		for _, r := range rules {
			if !r.from(p.Path) {
				continue
			}
			deps := p.Imports
			if r.deep {
				deps = p.Deps
			}
			for _, d := range deps {
				if !strings.HasPrefix(d, module+"/") && d != module {
					continue
				}
				rel := strings.TrimPrefix(strings.TrimPrefix(d, module), "/")
				if r.to(rel) && (r.allow == nil || !r.allow(p.Path, rel)) {
					how := "imports"
					if r.deep && !slices.Contains(p.Imports, d) {
						how = "depends on"
					}
					out = append(out, fmt.Sprintf("rule %s: %s %s %s", r.name, p.Path, how, rel))
				}
			}
		}
		for _, tp := range thirdParty {
			for _, d := range p.Imports {
				if (d == tp.lib || strings.HasPrefix(d, tp.lib+"/")) && !tp.users(p.Path) {
					out = append(out, fmt.Sprintf("rule 9. %s is used only where it is wrapped: %s imports %s", tp.lib, p.Path, d))
				}
			}
		}
	}
	return out
}

// listModule runs go list over the whole module.
func listModule(t *testing.T) []pkg {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = root
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(outPipe)
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Deps       []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list: %v", err)
		}
		pkgs = append(pkgs, pkg{Path: strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/"), Imports: p.Imports, Deps: p.Deps})
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: not the module", len(pkgs))
	}
	return pkgs
}

// TestDependencyRules fails for every import that crosses a line docs/architecture.md draws.
func TestDependencyRules(t *testing.T) {
	for _, v := range violations(listModule(t)) {
		t.Error(v)
	}
}

// TestRulesCatchViolations checks that the rules see a crossing of each kind, so that the
// test above cannot pass for want of looking.
func TestRulesCatchViolations(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	for _, tc := range []struct {
		name string
		pkg  pkg
		rule string
	}{
		{"control plane reaches the edge through another package", pkg{Path: "controlplane/httpapi", Imports: []string{m("shared/flags")},
			Deps: []string{m("shared/flags"), m("edge/jsonenc")}}, "rule 1."},
		{"shared imports the control plane", pkg{Path: "shared/event", Imports: []string{m("controlplane")}, Deps: []string{m("controlplane")}}, "rule 2."},
		{"the domain imports the event decoder", pkg{Path: "controlplane", Imports: []string{m("shared/event")}, Deps: []string{m("shared/event")}}, "rule 3."},
		{"evaluation reaches PostgreSQL", pkg{Path: "controlplane/flageval", Imports: []string{m("controlplane/postgres")}, Deps: []string{m("controlplane/postgres")}}, "rule 4."},
		{"the console calls the API", pkg{Path: "controlplane/console", Imports: []string{m("controlplane/httpapi")}, Deps: []string{m("controlplane/httpapi")}}, "rule 5."},
		{"decide imports capture", pkg{Path: "edge/decide", Imports: []string{m("edge/capture")}, Deps: []string{m("edge/capture")}}, "rule 6."},
		{"the control plane looks up addresses", pkg{Path: "controlplane/flageval", Deps: []string{m("geoip")}}, "rule 7."},
		{"a program uses a test database", pkg{Path: "controlplane/cmd/controlplane", Imports: []string{m("internal/pgtest")}, Deps: []string{m("internal/pgtest")}}, "rule 8."},
		{"pgx outside the store", pkg{Path: "controlplane/httpapi", Imports: []string{"github.com/jackc/pgx/v5"}}, "rule 9."},
	} {
		got := violations([]pkg{tc.pkg})
		if len(got) == 0 || !strings.HasPrefix(got[0], tc.rule) {
			t.Errorf("%s: violations %q, want one of %s", tc.name, got, tc.rule)
		}
	}
	if got := violations([]pkg{{Path: "controlplane/cmd/controlplane", Imports: []string{m("controlplane/postgres"), m("controlplane/httpapi")},
		Deps: []string{m("controlplane/postgres"), m("controlplane/httpapi")}}}); len(got) != 0 {
		t.Errorf("cmd combining adapters: %q, want none", got)
	}
}

// TestArchitectureListsEveryPackage holds docs/architecture.md's package table to go list: a
// package missing from the table is one a newcomer cannot place, and a row without a package
// describes what no longer exists.
func TestArchitectureListsEveryPackage(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9/_]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		listed[m[1]] = true
	}
	if len(listed) < 20 {
		t.Fatalf("found %d rows in docs/architecture.md's package table: not the table", len(listed))
	}
	for _, p := range listModule(t) {
		if !listed[p.Path] {
			t.Errorf("package %s is not in docs/architecture.md's package table: add a row saying what it is for", p.Path)
		}
		delete(listed, p.Path)
	}
	for p := range listed {
		t.Errorf("docs/architecture.md's package table lists %s, which go list does not find: remove or rename the row", p)
	}
}

package postgres_test

// TestFailClosed proves that the control plane's services fail closed: it walks every
// exported method of every interface-typed field of controlplane.Services by reflection and
// calls it
//
//   - with no user in the context ("no user"),
//   - as an admin of another organisation ("other organisation's admin"), and as a member of
//     it ("other organisation's member"), and
//   - as a member of the victim organisation who has no role access to the victim's
//     restricted flag ("member without role access"),
//
// expecting a refusal (NotAuthenticated, Forbidden or NotFound: never a validation error,
// never success), or, for a list from another organisation, an answer that tells nothing of
// the victim's objects: no element and a total of 0, and for an answer keyed by the ids
// asked about (a map: RoleService.EditableFlags) the same answer as for ids of no object.
//
// Around every call it fingerprints every row of every table, so a refused call that wrote
// anything fails too; after a call that wrote where it should not have, the fixture is built
// again in a fresh database, so that one hole neither hides nor fakes the next. One fixture
// serves every call otherwise: the whole test takes about a second, -race included. A first
// pass as the victim's own admin ("victim admin reads") checks that the arguments the test
// builds name real objects: every read succeeds and every list is non-empty, so the
// refusals that follow are the checks' doing and the empty lists the scoping's, not bad
// arguments'.
//
// Where it lives. It needs the services as the control plane wires them, and only that:
// wiredServices below is the one line that knows how (postgres.NewServices: every store
// decides who may do what in its own transaction). It is an external test of
// controlplane/postgres, the package that holds the checks.
//
// How arguments are built: from each parameter's type, never from a list per method, so a
// changed signature needs no change here.
//
//   - context.Context: the context of the case (acting as its user, or as nobody);
//   - *controlplane.User (should a method take one again): the case's user; with no user in
//     the context, the victim's admin (a call naming a user it does not act as);
//   - int64: 1. The victim's organisation and its objects are created first in a fresh
//     database, so that every table's first row is the victim's (its organisation, admin,
//     project, personal key, flag, role access, cohort, annotation, scheduled change,
//     webhook and person all have id 1; newFixture checks it);
//   - int: 100 for the first int parameter (a limit, a count), 0 for the next (an offset);
//   - string: the victim's id of the kind the service is about (stringKinds: a role of Roles,
//     a feature of EarlyAccess, an event of Analytics, a user of Users), else a fresh valid
//     name;
//   - bool: false; []int64: [1]; other slices and maps: empty; funcs (the persons iterator
//     of a static cohort): a func that yields nothing and returns zero values;
//   - structs and pointers to structs (filters, updates, a project): zero values but for
//     fields by name: int64 fields named ID or …ID get 1 (ProjectID, OrganizationID), Limit
//     gets 100, Key a fresh valid flag key, Name/Content/Label/Description fresh text,
//     Email a fresh address.
//
// Where a type cannot say which value makes the call meaningful, overrides (keyed
// "Service.Method") adjust the built arguments; a method without one is still called with
// the defaults, so a new method is never skipped.
//
// How to classify a new method (the test fails, naming the method, until you do):
//
//   - its name must start with a read prefix (readPrefixes) or a write prefix
//     (writePrefixes);
//   - if it establishes who the user is or is public by design, add it to public (it is
//     then not called at all: say why);
//   - otherwise give it its rule in asMember: what a plain member of the organisation,
//     without role access to a restricted flag, may do with the victim's objects — memberMay
//     (reads must then succeed; writes are not called, to keep the fixture intact),
//     flagEdit (changes the flag or what hangs off it: role access, its schedules, static
//     cohorts and dashboards made from it, its early access feature, copying it),
//     flagEditRead (a read only the flag's editors may make: the preview of its copy),
//     adminOnly or ownerOnly (all four must be refused);
//   - if, called by another organisation's user, it addresses nothing of the victim's
//     (it acts in the caller's own organisation), add it to ownOnly: it may then succeed
//     there, provided it changes no existing row and returns nothing of another
//     organisation's.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/internal/pgtest"
)

// wiredServices returns the services as httpapi, the console and the scheduler get them.
func wiredServices(db *postgres.DB) controlplane.Services {
	return postgres.NewServices(db, bcrypt.MinCost)
}

// public are the methods that establish who the user is, or are public by design: they need
// no user (postgres.NewServices and the services' comments) and are not called.
var public = map[string]string{
	"Auth.AuthenticatePersonalKey": "establishes the user from a personal key's secret",
	"Sessions.CreateSession":       "opens a console session once the password is checked",
	"Sessions.FindSession":         "establishes the user from a session token",
	"Sessions.DeleteSession":       "logs out whoever holds the token",
	"Users.SetPassword":            "the log-in path: a password for an email",
	"Users.SetPasswordWithToken":   "the invite path: whoever holds the token sets the password",
	"Users.CheckPassword":          "the log-in path: establishes the user",
	"Projects.FindProjectByToken":  "the public token admits whoever holds it (the SDKs' flag definitions)",
}

// Method name prefixes of reads and writes: every method but the public ones has one.
var (
	readPrefixes  = []string{"Find", "Editable"}
	writePrefixes = []string{"Create", "Update", "Delete", "Add", "Remove", "Set", "Ensure", "Invite", "Approve", "Reject", "Cancel"}
)

// memberRule is what a member of the victim organisation without role access to its
// restricted flag 1 may do with the victim's objects.
type memberRule int

const (
	memberMay    memberRule = iota + 1 // allowed: a read must succeed; a write is not called
	flagEdit                           // changes flag 1 or what hangs off it: refused
	adminOnly                          // only the organisation's admins: refused
	ownerOnly                          // only the victim admin's own (personal keys): refused
	approverOnly                       // only the approvers of a change request (its requester, to cancel): refused
	flagEditRead                       // a read only those who may change flag 1 may make: refused
)

var asMember = map[string]memberRule{
	"Projects.FindProjectByID": memberMay,
	"Projects.FindProjects":    memberMay,
	"Projects.CreateProject":   memberMay,
	"Projects.UpdateProject":   memberMay,

	"Flags.FindFlagByID": memberMay,
	"Flags.FindFlags":    memberMay,
	"Flags.CreateFlag":   memberMay, // a new flag, not flag 1
	"Flags.UpdateFlag":   flagEdit,

	"FlagCopies.CreateFlagCopies":     flagEdit,     // copying flag 1 takes the right to change it, as PostHog
	"FlagCopies.FindCopyRequirements": flagEditRead, // so does the preview of what the copy brings along

	"Activity.FindActivity": memberMay,

	"Analytics.FindEvents":      memberMay,
	"Analytics.FindEventByUUID": memberMay,
	"Analytics.FindPersons":     memberMay,
	"Analytics.FindPersonByID":  memberMay,
	"Analytics.FindGroups":      memberMay,

	"Annotations.FindAnnotations":    memberMay,
	"Annotations.FindAnnotationByID": memberMay,
	"Annotations.CreateAnnotation":   memberMay,
	"Annotations.UpdateAnnotation":   memberMay,

	"Roles.FindRoles":          memberMay,
	"Roles.FindRoleByID":       memberMay,
	"Roles.FindMemberships":    memberMay,
	"Roles.FindRoleAccess":     memberMay,
	"Roles.FindRoleAccessByID": memberMay,
	"Roles.EditableFlags":      memberMay, // answers for the member: flag 1 is not editable
	"Roles.CreateRole":         adminOnly,
	"Roles.UpdateRole":         adminOnly,
	"Roles.DeleteRole":         adminOnly,
	"Roles.AddMember":          adminOnly, // the member adding themselves to the flag's editors
	"Roles.RemoveMember":       adminOnly,
	"Roles.CreateRoleAccess":   flagEdit,
	"Roles.DeleteRoleAccess":   flagEdit,

	"Cohorts.FindCohorts":        memberMay,
	"Cohorts.FindCohortByID":     memberMay,
	"Cohorts.CreateCohort":       memberMay,
	"Cohorts.UpdateCohort":       memberMay,
	"Cohorts.SetCount":           memberMay,
	"Cohorts.CreateStaticCohort": flagEdit, // the persons flag 1 is enabled for

	"Cohorts.FindCohortPersons":            memberMay,
	"Cohorts.AddPersonsToStaticCohort":     memberMay, // as any other change of a cohort
	"Cohorts.RemovePersonFromStaticCohort": memberMay,

	"EarlyAccess.FindEarlyAccessFeatures":    memberMay,
	"EarlyAccess.FindEarlyAccessFeatureByID": memberMay,
	"EarlyAccess.CreateEarlyAccessFeature":   flagEdit, // linking a restricted flag (overrides) gives its feature's stage a say in its filters
	"EarlyAccess.UpdateEarlyAccessFeature":   flagEdit, // the stage change (overrides) rewrites flag 1's filters
	"EarlyAccess.DeleteEarlyAccessFeature":   flagEdit, // takes the enrolment condition off flag 1

	"Dashboards.EnsureUsageDashboard": flagEdit,

	"Users.FindOrganization":         memberMay,
	"Users.FindMembers":              memberMay,
	"Users.InviteMember":             adminOnly,
	"Users.RemoveOrganizationMember": adminOnly,

	"Keys.FindKeys":    memberMay, // the member's own keys
	"Keys.FindKeyByID": ownerOnly, // key 1 is the victim admin's
	"Keys.CreateKey":   memberMay, // the member's own key
	"Keys.UpdateKey":   ownerOnly,
	"Keys.DeleteKey":   ownerOnly,

	"Schedules.FindScheduledChanges":    memberMay,
	"Schedules.FindScheduledChangeByID": memberMay,
	"Schedules.CreateScheduledChange":   flagEdit,
	"Schedules.UpdateScheduledChange":   flagEdit, // scheduled change 1 is of flag 1
	"Schedules.DeleteScheduledChange":   flagEdit,

	"ReleasePlans.FindReleasePlan":     memberMay,
	"ReleasePlans.CreateReleasePlan":   flagEdit, // starts a plan on flag 1 (its plan is running: refused for that too, but only after the check)
	"ReleasePlans.SetReleasePlanState": flagEdit, // pauses flag 1's plan

	"ReleasePlans.FindReleasePlanHistory": memberMay, // plan 1's points

	"Webhooks.FindWebhooks":    adminOnly,
	"Webhooks.FindWebhookByID": adminOnly,
	"Webhooks.FindDeliveries":  adminOnly,
	"Webhooks.CreateWebhook":   adminOnly,
	"Webhooks.UpdateWebhook":   adminOnly,
	"Webhooks.DeleteWebhook":   adminOnly,

	"Approvals.FindApprovalPolicies":   memberMay,
	"Approvals.FindApprovalPolicyByID": memberMay,
	"Approvals.CreateApprovalPolicy":   adminOnly,
	"Approvals.UpdateApprovalPolicy":   adminOnly,
	"Approvals.DeleteApprovalPolicy":   adminOnly,
	"Approvals.FindChangeRequests":     memberMay,
	"Approvals.FindChangeRequestByID":  memberMay,
	"Approvals.ApproveChangeRequest":   approverOnly, // the victim's request names the editor as approver
	"Approvals.RejectChangeRequest":    approverOnly,
	"Approvals.CancelChangeRequest":    approverOnly, // the victim admin's own request

	"EventDestinations.FindEventDestinations":    adminOnly,
	"EventDestinations.FindEventDestinationByID": adminOnly,
	"EventDestinations.FindForwardDeadLetters":   adminOnly,
	"EventDestinations.CreateEventDestination":   adminOnly,
	"EventDestinations.UpdateEventDestination":   adminOnly,
	"EventDestinations.DeleteEventDestination":   adminOnly,
}

// ownOnly are the methods that, called by another organisation's user with the default
// arguments, address nothing of the victim's: they act in the caller's own organisation or
// account.
var ownOnly = map[string]string{
	"Roles.CreateRole":   "creates a role in the caller's organisation",
	"Users.InviteMember": "invites into the caller's organisation",
	"Keys.FindKeys":      "lists the caller's keys",
	"Keys.CreateKey":     "issues a key to the caller",
}

// stringKinds give a service's string parameters the victim's id of the kind the service is
// about; other services' strings are fresh names.
var stringKinds = map[string]func(fx *fixture) string{
	"Roles":       func(fx *fixture) string { return fx.editors },
	"EarlyAccess": func(fx *fixture) string { return fx.feature },
	"Analytics":   func(fx *fixture) string { return fx.event },
	"Users":       func(fx *fixture) string { return fx.editor.UUID },
	"Approvals":   func(fx *fixture) string { return fx.changeRequest },
}

// overrides adjust the built arguments of methods whose parameters' types cannot say which
// value makes the call meaningful.
var overrides = map[string]func(fx *fixture, in []reflect.Value){
	// The member without role access adding themselves to the role that may edit flag 1.
	"Roles.AddMember":    func(fx *fixture, in []reflect.Value) { setStrings(in, fx.editors, fx.member.UUID) },
	"Roles.RemoveMember": func(fx *fixture, in []reflect.Value) { setStrings(in, fx.editors, fx.editorMembership) },
	// A role without access yet, so the grant would succeed.
	"Roles.CreateRoleAccess": func(fx *fixture, in []reflect.Value) { setStrings(in, fx.viewers) },
	"Activity.FindActivity": func(fx *fixture, in []reflect.Value) {
		argOf[controlplane.ActivityFilter](in).Scope = controlplane.ObjectFlag
	},
	// Flag 1 copied into its own project: the victim's admin may, as a no-op.
	"FlagCopies.CreateFlagCopies":     func(fx *fixture, in []reflect.Value) { *argOf[controlplane.FlagCopyRequest](in) = copyFlag1() },
	"FlagCopies.FindCopyRequirements": func(fx *fixture, in []reflect.Value) { *argOf[controlplane.FlagCopyRequest](in) = copyFlag1() },
	"Schedules.CreateScheduledChange": func(fx *fixture, in []reflect.Value) {
		*argOf[controlplane.NewScheduledChange](in) = fx.newSchedule()
	},
	// Linking a restricted flag without a feature (flag 1 has the fixture's), in a stage
	// that leaves its filters alone: the link itself takes edit access to the flag.
	"EarlyAccess.CreateEarlyAccessFeature": func(fx *fixture, in []reflect.Value) {
		u := argOf[controlplane.EarlyAccessFeatureUpdate](in)
		u.Stage, u.FeatureFlagID = ptr(controlplane.StageDraft), ptr(fx.unlinked)
	},
	"EarlyAccess.UpdateEarlyAccessFeature": func(fx *fixture, in []reflect.Value) {
		argOf[controlplane.EarlyAccessFeatureUpdate](in).Stage = ptr(controlplane.StageDraft)
	},
	"Approvals.FindApprovalPolicyByID": func(fx *fixture, in []reflect.Value) { setStrings(in, fx.policy) },
	"Approvals.UpdateApprovalPolicy":   func(fx *fixture, in []reflect.Value) { setStrings(in, fx.policy) },
	"Approvals.DeleteApprovalPolicy":   func(fx *fixture, in []reflect.Value) { setStrings(in, fx.policy) },
	"ReleasePlans.CreateReleasePlan": func(fx *fixture, in []reflect.Value) {
		*argOf[controlplane.NewReleasePlan](in) = victimPlan()
	},
	"ReleasePlans.SetReleasePlanState": func(fx *fixture, in []reflect.Value) { setStrings(in, controlplane.PlanPaused) },
	"Webhooks.CreateWebhook": func(fx *fixture, in []reflect.Value) {
		*argOf[controlplane.WebhookUpdate](in) = fx.hook()
	},
	"EventDestinations.CreateEventDestination": func(fx *fixture, in []reflect.Value) {
		*argOf[controlplane.EventDestinationUpdate](in) = fx.destination()
	},
}

func TestFailClosed(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, t)
	methods := walk(t, fx.s)
	checkClassification(t, methods)

	t.Run("victim admin reads", func(t *testing.T) {
		fx.pass(t, methods, func(t *testing.T, m method) {
			if m.write {
				t.Skip("a write: only reads are checked as the victim's admin")
			}
			r := fx.call(t, m, fx.as(fx.admin), fx.admin)
			if r.err != nil {
				t.Fatalf("the victim's admin cannot read with the built arguments: %v", r.err)
			}
			if r.list && r.empty() {
				t.Fatalf("the victim's admin reads an empty list: the fixture or the arguments do not reach the victim's objects")
			}
			r.mustNotWrite(t)
		})
	})

	t.Run("no user", func(t *testing.T) {
		fx.pass(t, methods, func(t *testing.T, m method) {
			r := fx.call(t, m, t.Context(), fx.admin)
			r.mustBeRefused(t, controlplane.NotAuthenticated, controlplane.Forbidden, controlplane.NotFound)
		})
	})

	// Another organisation's admin, and its member: stores answer admins by shortcuts (every
	// flag of their organisation is theirs to edit), members by queries, so both are tried.
	for _, outsider := range []struct {
		name string
		user func() *controlplane.User
	}{{"other organisation's admin", func() *controlplane.User { return fx.attacker }},
		{"other organisation's member", func() *controlplane.User { return fx.attackerMember }}} {
		t.Run(outsider.name, func(t *testing.T) {
			fx.pass(t, methods, func(t *testing.T, m method) {
				u := outsider.user()
				r := fx.call(t, m, fx.as(u), u)
				if _, own := ownOnly[m.key()]; own {
					r.mustStayOwn(t, u)
					return
				}
				if r.err == nil && r.list {
					if nothing := fx.answerForNothing(t, m, u); !r.tellsNothing(nothing) {
						t.Errorf("answered about the victim's objects: %s (for ids of no object: %s)", r.describe(), nothing.describe())
					}
					r.mustNotWrite(t)
					return
				}
				r.mustBeRefused(t, controlplane.NotAuthenticated, controlplane.Forbidden, controlplane.NotFound)
			})
		})
	}

	t.Run("member without role access", func(t *testing.T) {
		fx.pass(t, methods, func(t *testing.T, m method) {
			rule := asMember[m.key()]
			if rule == memberMay && m.write {
				t.Skip("a member may do it; not called, to keep the victim's fixture intact")
			}
			r := fx.call(t, m, fx.as(fx.member), fx.member)
			if rule == memberMay {
				if r.err != nil {
					t.Errorf("a member may read this, got %v", r.err)
				}
				r.mustNotWrite(t)
				return
			}
			r.mustBeRefused(t, controlplane.Forbidden, controlplane.NotFound)
		})
	})
}

// method is one method of one service of controlplane.Services.
type method struct {
	service, name string
	write         bool // by its name's prefix
}

func (m method) key() string { return m.service + "." + m.name }

// fn is the method of s.
func (m method) fn(s controlplane.Services) reflect.Value {
	return reflect.ValueOf(s).FieldByName(m.service).MethodByName(m.name)
}

// walk returns every method of every interface-typed field of s, in declaration order.
func walk(t *testing.T, s controlplane.Services) []method {
	var out []method
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type.Kind() != reflect.Interface {
			continue
		}
		if v.Field(i).IsNil() {
			t.Errorf("wiredServices leaves Services.%s nil", f.Name)
			continue
		}
		for j := range f.Type.NumMethod() {
			name := f.Type.Method(j).Name
			out = append(out, method{service: f.Name, name: name, write: hasPrefix(name, writePrefixes)})
		}
	}
	return out
}

func hasPrefix(name string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// checkClassification fails for a method the test cannot classify and for a table entry
// that names no method.
func checkClassification(t *testing.T, methods []method) {
	exists := map[string]bool{}
	services := map[string]bool{}
	for _, m := range methods {
		k := m.key()
		exists[k], services[m.service] = true, true
		if _, ok := public[k]; ok {
			continue
		}
		read, write := hasPrefix(m.name, readPrefixes), hasPrefix(m.name, writePrefixes)
		if read == write {
			t.Errorf("%s: cannot tell whether it reads or writes: start its name with one of %v (reads) or %v (writes), or extend those lists",
				k, readPrefixes, writePrefixes)
		}
		rule, ok := asMember[k]
		switch {
		case !ok:
			t.Errorf("%s is not classified: add it to public (identity, public by design) or give it its rule in asMember (see the file's comment)", k)
		case rule == flagEdit && !write:
			t.Errorf("%s is classified flagEdit but its name is a read's", k)
		}
	}
	for name, table := range map[string][]string{"public": keys(public), "asMember": keys(asMember),
		"ownOnly": keys(ownOnly), "overrides": keys(overrides)} {
		for _, k := range table {
			if !exists[k] {
				t.Errorf("%s names %s, which is no method of controlplane.Services: remove it", name, k)
			}
			if _, ok := public[k]; ok && name != "public" {
				t.Errorf("%s names %s, which is public (not called)", name, k)
			}
		}
	}
	for s := range stringKinds {
		if !services[s] {
			t.Errorf("stringKinds names %s, which is no service of controlplane.Services", s)
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// pass runs check for every method but the public ones, as subtests Service/Method.
func (fx *fixture) pass(t *testing.T, methods []method, check func(t *testing.T, m method)) {
	for i := 0; i < len(methods); {
		service := methods[i].service
		j := i
		for j < len(methods) && methods[j].service == service {
			j++
		}
		t.Run(service, func(t *testing.T) {
			for _, m := range methods[i:j] {
				if _, ok := public[m.key()]; ok {
					continue
				}
				fx.dirty = false
				if !t.Run(m.name, func(t *testing.T) { check(t, m) }) && fx.dirty {
					// The call wrote where it should not have: a fresh fixture, so that
					// one hole cannot hide or fake the next.
					*fx = *newFixture(t, fx.owner)
				}
			}
		})
		i = j
	}
}

// result is what one call returned, with the database's fingerprints around it.
type result struct {
	m             method
	out           []reflect.Value // the results but the error
	err           error
	list          bool // the first result is a slice or a map
	before, after fingerprint
}

// call calls m as the user ctx acts as, with arguments built from its parameters' types.
func (fx *fixture) call(t *testing.T, m method, ctx context.Context, actor *controlplane.User) *result {
	t.Helper()
	in := fx.args(t, m, ctx, actor)
	r := &result{m: m, before: fx.fingerprint(t)}
	out := func() (out []reflect.Value) {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("%s panicked: %v", m.key(), p)
			}
		}()
		return m.fn(fx.s).Call(in)
	}()
	r.after = fx.fingerprint(t)
	fx.dirty = r.before.diff(r.after, false) != ""
	last := out[len(out)-1]
	if last.Type() != reflect.TypeFor[error]() {
		t.Fatalf("%s does not return an error last: the test expects every service method to", m.key())
	}
	if !last.IsNil() {
		r.err = last.Interface().(error)
	}
	r.out = out[:len(out)-1]
	if len(r.out) > 0 {
		k := r.out[0].Kind()
		r.list = k == reflect.Slice || k == reflect.Map
	}
	return r
}

// empty reports whether every slice and map the call returned is empty and every int (a
// total) is 0.
func (r *result) empty() bool {
	for _, v := range r.out {
		switch v.Kind() {
		case reflect.Slice, reflect.Map:
			if v.Len() > 0 {
				return false
			}
		case reflect.Int:
			if v.Int() != 0 {
				return false
			}
		}
	}
	return true
}

func (r *result) describe() string {
	var parts []string
	for _, v := range r.out {
		b, err := json.Marshal(v.Interface())
		if err != nil {
			b = fmt.Appendf(nil, "%v", v.Interface())
		}
		if len(b) > 300 {
			b = append(b[:300], "…"...)
		}
		parts = append(parts, string(b))
	}
	return strings.Join(parts, ", ")
}

// answerForNothing calls m as user with every id an id of no object.
func (fx *fixture) answerForNothing(t *testing.T, m method, user *controlplane.User) *result {
	t.Helper()
	fx.id = nothingID
	defer func() { fx.id = 1 }()
	r := fx.call(t, m, fx.as(user), user)
	if r.err != nil {
		t.Fatalf("for ids of no object: %v", r.err)
	}
	return r
}

// tellsNothing reports whether the list r answers tells nothing of the objects asked about:
// its slices are empty and its totals 0, and its maps (answers keyed by the ids asked about)
// hold the values the same call holds for ids of no object.
func (r *result) tellsNothing(nothing *result) bool {
	for i, v := range r.out {
		switch v.Kind() {
		case reflect.Slice:
			if v.Len() > 0 {
				return false
			}
		case reflect.Int:
			if v.Int() != 0 {
				return false
			}
		case reflect.Map:
			if !slices.Equal(mapValues(v), mapValues(nothing.out[i])) {
				return false
			}
		}
	}
	return true
}

func mapValues(v reflect.Value) []string {
	var out []string
	for _, k := range v.MapKeys() {
		out = append(out, fmt.Sprint(v.MapIndex(k).Interface()))
	}
	sort.Strings(out)
	return out
}

// mustBeRefused fails unless the call returned an error of one of the kinds and wrote
// nothing.
func (r *result) mustBeRefused(t *testing.T, kinds ...controlplane.Kind) {
	t.Helper()
	switch {
	case r.err == nil:
		t.Errorf("succeeded, want a refusal: returned %s", r.describe())
	case !slices.Contains(kinds, controlplane.ErrorKind(r.err)):
		t.Errorf("got %q (kind %s), want a refusal of kind %s", r.err, kindName(controlplane.ErrorKind(r.err)), kindNames(kinds))
	}
	r.mustNotWrite(t)
}

// mustNotWrite fails when a row of any table changed, appeared or went.
func (r *result) mustNotWrite(t *testing.T) {
	t.Helper()
	if d := r.before.diff(r.after, false); d != "" {
		t.Errorf("wrote to the database: %s", d)
	}
}

// mustStayOwn fails when a call of another organisation's user changed or deleted a row or
// returned something of an organisation or a user other than the caller (it may fail, or add
// rows of its own).
func (r *result) mustStayOwn(t *testing.T, u *controlplane.User) {
	t.Helper()
	if d := r.before.diff(r.after, true); d != "" {
		t.Errorf("changed rows that were there: %s", d)
	}
	if r.err != nil {
		return
	}
	for _, v := range r.out {
		for _, id := range fieldValues(v, "OrganizationID", 0) {
			if id != u.OrganizationID {
				t.Errorf("returned an object of organisation %d, not the caller's (%d): %s", id, u.OrganizationID, r.describe())
			}
		}
		for _, id := range fieldValues(v, "UserID", 0) {
			if id != u.ID {
				t.Errorf("returned an object of user %d, not the caller's (%d): %s", id, u.ID, r.describe())
			}
		}
	}
}

// fieldValues returns the int64 values of the fields named name in v, at any depth.
func fieldValues(v reflect.Value, name string, depth int) []int64 {
	if depth > 6 {
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return fieldValues(v.Elem(), name, depth+1)
	case reflect.Slice:
		var out []int64
		for i := range v.Len() {
			out = append(out, fieldValues(v.Index(i), name, depth+1)...)
		}
		return out
	case reflect.Struct:
		var out []int64
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Name == name && f.Type.Kind() == reflect.Int64 {
				out = append(out, v.Field(i).Int())
				continue
			}
			out = append(out, fieldValues(v.Field(i), name, depth+1)...)
		}
		return out
	}
	return nil
}

func kindName(k controlplane.Kind) string {
	names := map[controlplane.Kind]string{controlplane.Internal: "Internal", controlplane.Invalid: "Invalid",
		controlplane.Malformed: "Malformed", controlplane.NotAuthenticated: "NotAuthenticated",
		controlplane.BadCredentials: "BadCredentials", controlplane.Forbidden: "Forbidden",
		controlplane.NotFound: "NotFound", controlplane.TooLarge: "TooLarge"}
	if n, ok := names[k]; ok {
		return n
	}
	return fmt.Sprint(int(k))
}

func kindNames(kinds []controlplane.Kind) string {
	var names []string
	for _, k := range kinds {
		names = append(names, kindName(k))
	}
	return strings.Join(names, ", ")
}

// args builds m's arguments from its parameters' types (see the file's comment), then
// applies the method's override.
func (fx *fixture) args(t *testing.T, m method, ctx context.Context, actor *controlplane.User) []reflect.Value {
	t.Helper()
	ft := m.fn(fx.s).Type()
	in := make([]reflect.Value, ft.NumIn())
	ints := 0
	for i := range in {
		p := ft.In(i)
		switch {
		case p == reflect.TypeFor[context.Context]():
			in[i] = reflect.ValueOf(ctx)
		case p == reflect.TypeFor[*controlplane.User]():
			in[i] = reflect.ValueOf(actor)
		case p.Kind() == reflect.Int:
			n := 0
			if ints == 0 {
				n = 100
			}
			ints++
			in[i] = reflect.ValueOf(n).Convert(p)
		case p.Kind() == reflect.String:
			s := fx.text()
			if kind, ok := stringKinds[m.service]; ok {
				s = kind(fx)
			}
			in[i] = reflect.ValueOf(s).Convert(p)
		default:
			in[i] = fx.value(t, m, p)
		}
	}
	if o, ok := overrides[m.key()]; ok {
		o(fx, in)
	}
	return in
}

// value is the default of a parameter of type p that is no context, user, int or string.
func (fx *fixture) value(t *testing.T, m method, p reflect.Type) reflect.Value {
	t.Helper()
	v := reflect.New(p).Elem()
	switch p.Kind() {
	case reflect.Int64:
		v.SetInt(fx.id)
	case reflect.Bool:
	case reflect.Slice:
		if p.Elem().Kind() == reflect.Int64 {
			v = reflect.Append(reflect.MakeSlice(p, 0, 1), reflect.ValueOf(fx.id).Convert(p.Elem()))
		} else {
			v = reflect.MakeSlice(p, 0, 0)
		}
	case reflect.Map:
		v = reflect.MakeMap(p)
	case reflect.Func:
		v = reflect.MakeFunc(p, func([]reflect.Value) []reflect.Value {
			out := make([]reflect.Value, p.NumOut())
			for i := range out {
				out[i] = reflect.Zero(p.Out(i))
			}
			return out
		})
	case reflect.Struct:
		fx.fill(v)
	case reflect.Pointer:
		e := reflect.New(p.Elem())
		if p.Elem().Kind() == reflect.Struct {
			fx.fill(e.Elem())
		}
		v = e
	default:
		t.Fatalf("%s takes a %v: the test has no default for that type; teach fixture.value one", m.key(), p)
	}
	return v
}

// fill sets the fields of the struct v that name the victim or need a valid value.
func (fx *fixture) fill(v reflect.Value) {
	for i := range v.NumField() {
		f, fv := v.Type().Field(i), v.Field(i)
		if !f.IsExported() {
			continue
		}
		switch {
		case f.Type.Kind() == reflect.Int64 && strings.HasSuffix(f.Name, "ID"):
			fv.SetInt(fx.id)
		case f.Type.Kind() == reflect.Int && f.Name == "Limit":
			fv.SetInt(100)
		case f.Type.Kind() == reflect.String || (f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.String):
			s, ok := fx.textField(f.Name)
			if !ok {
				continue
			}
			if f.Type.Kind() == reflect.String {
				fv.SetString(s)
			} else {
				fv.Set(reflect.ValueOf(&s).Convert(f.Type))
			}
		}
	}
}

// textField is the value of a string field by its name, when it needs one.
func (fx *fixture) textField(name string) (string, bool) {
	switch name {
	case "Key":
		return fx.text(), true
	case "Name", "Content", "Label", "Description":
		return fx.text(), true
	case "Email":
		return fx.text() + "@example.com", true
	}
	return "", false
}

// text is a fresh valid name (and flag key).
func (fx *fixture) text() string {
	fx.n++
	return fmt.Sprintf("failclosed-%d", fx.n)
}

// setStrings sets the string parameters of in, in order.
func setStrings(in []reflect.Value, values ...string) {
	for i := range in {
		if len(values) > 0 && in[i].Kind() == reflect.String {
			in[i], values = reflect.ValueOf(values[0]).Convert(in[i].Type()), values[1:]
		}
	}
	if len(values) > 0 {
		panic(fmt.Sprintf("setStrings: %d values left over", len(values)))
	}
}

// argOf returns the parameter of type T (or *T) of in, to change it.
func argOf[T any](in []reflect.Value) *T {
	for _, v := range in {
		switch {
		case v.Type() == reflect.TypeFor[T]() && v.CanAddr():
			return v.Addr().Interface().(*T)
		case v.Type() == reflect.TypeFor[*T]() && !v.IsNil():
			return v.Interface().(*T)
		}
	}
	panic(fmt.Sprintf("argOf: no parameter of type %v", reflect.TypeFor[T]()))
}

func ptr[T any](v T) *T { return &v }

// fingerprint is every row of every table, as a multiset of (table, md5 of the row).
type fingerprint map[string]int

func (fx *fixture) fingerprint(t *testing.T) fingerprint {
	t.Helper()
	rows, err := fx.db.Pool.Query(context.Background(), fx.fingerprintSQL)
	if err != nil {
		t.Fatalf("fingerprint: %v", err)
	}
	defer rows.Close()
	fp := fingerprint{}
	for rows.Next() {
		var table, sum string
		if err := rows.Scan(&table, &sum); err != nil {
			t.Fatalf("fingerprint: %v", err)
		}
		fp[table+" "+sum]++
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("fingerprint: %v", err)
	}
	return fp
}

// diff describes how after differs from fp, per table; "" when it does not (when
// insertsAllowed, rows only added do not count).
func (fp fingerprint) diff(after fingerprint, insertsAllowed bool) string {
	added, removed := map[string]int{}, map[string]int{}
	for k, n := range after {
		if d := n - fp[k]; d > 0 {
			added[strings.Fields(k)[0]] += d
		}
	}
	for k, n := range fp {
		if d := n - after[k]; d > 0 {
			removed[strings.Fields(k)[0]] += d
		}
	}
	var out []string
	for _, table := range keys(mergeKeys(added, removed)) {
		a, r := added[table], removed[table]
		switch {
		case r == 0 && insertsAllowed:
		case a > 0 && r > 0 && a == r:
			out = append(out, fmt.Sprintf("%s: %d rows changed", table, a))
		default:
			out = append(out, fmt.Sprintf("%s: %d rows added, %d gone", table, a, r))
		}
	}
	return strings.Join(out, "; ")
}

func mergeKeys(a, b map[string]int) map[string]int {
	out := map[string]int{}
	for k := range a {
		out[k] = 1
	}
	for k := range b {
		out[k] = 1
	}
	return out
}

// fixture is the victim organisation, created first in a fresh database so that its objects
// have id 1, and the users of the cases.
type fixture struct {
	id             int64      // the id arguments get: 1, the victim's (nothingID: no object's)
	owner          *testing.T // the test the fixture's database belongs to
	db             *postgres.DB
	s              controlplane.Services
	fingerprintSQL string
	dirty          bool // a call wrote

	admin    *controlplane.User // the victim organisation's admin, user 1
	member   *controlplane.User // a member in the viewers role only: no role access to flag 1
	editor   *controlplane.User // a member in the editors role, which has access to flag 1
	attacker *controlplane.User // the admin of another organisation
	// attackerMember is a member of the attacker's organisation.
	attackerMember *controlplane.User

	editors, viewers string // role uuids; editors has role access 1 to flag 1
	editorMembership string
	feature          string // the early access feature on flag 1
	unlinked         int64  // a flag restricted as flag 1 is, without a feature
	event            string // an event's uuid
	policy           string // an approval policy gating enables, approved by the editor
	changeRequest    string // the admin's pending request to enable the unlinked flag
	n                int
}

func (fx *fixture) as(u *controlplane.User) context.Context {
	return controlplane.NewContextWithUser(context.Background(), u)
}

func (fx *fixture) newSchedule() controlplane.NewScheduledChange {
	return controlplane.NewScheduledChange{RecordID: "1", ModelName: controlplane.ModelFeatureFlag,
		Payload: json.RawMessage(`{"operation": "update_status", "value": false}`), ScheduledAt: ptr(time.Now().Add(24 * time.Hour))}
}

// copyFlag1 copies flag 1 into its own project.
func copyFlag1() controlplane.FlagCopyRequest {
	return controlplane.FlagCopyRequest{FeatureFlagKey: "victim-flag", SourceProjectID: 1, TargetProjectIDs: []int64{1}}
}

func (fx *fixture) hook() controlplane.WebhookUpdate {
	return controlplane.WebhookUpdate{URL: ptr("https://93.184.215.14/hook"), Events: controlplane.WebhookEventKinds,
		Secret: ptr("0123456789abcdef")}
}

func (fx *fixture) destination() controlplane.EventDestinationUpdate {
	return controlplane.EventDestinationUpdate{URL: ptr("https://93.184.215.14"), APIKey: ptr("phc_victimvictimvictim")}
}

// newFixture builds the fixture in a fresh database that lives as long as owner.
func newFixture(t, owner *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	db, err := postgres.Open(ctx, pgtest.NewDatabase(owner))
	if err != nil {
		t.Fatal(err)
	}
	owner.Cleanup(db.Close)
	fx := &fixture{id: 1, owner: owner, db: db, s: wiredServices(db)}

	// An organisation and its admin, as Bootstrap makes them but without a password: a
	// bcrypt hash of Bootstrap's cost takes seconds under -race.
	bootstrap := func(email, project string) *controlplane.User {
		if _, err := db.Pool.Exec(ctx, `WITH o AS (INSERT INTO organizations (name) VALUES ($1) RETURNING id)
			INSERT INTO users (distinct_id, first_name, email, is_email_verified, organization_id, org_role)
			SELECT gen_random_uuid()::text, 'admin', $1, true, o.id, 'admin' FROM o`, email); err != nil {
			t.Fatal(err)
		}
		res, err := postgres.Bootstrap(ctx, db, bcrypt.MinCost, email, project)
		if err != nil {
			t.Fatal(err)
		}
		key, err := postgres.NewAuthService(db).AuthenticatePersonalKey(ctx, res.PersonalAPIKey)
		if err != nil {
			t.Fatal(err)
		}
		return &key.User
	}
	user := func(email string) *controlplane.User {
		u, err := postgres.CreateUser(ctx, db, "admin@victim.example", email, "", false)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	fx.admin = bootstrap("admin@victim.example", "Victim")
	fx.member, fx.editor = user("member@victim.example"), user("editor@victim.example")
	va := fx.as(fx.admin)
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	project, err := fx.s.Projects.FindProjectByID(va, 1)
	check("project", err)
	hook, err := fx.s.Webhooks.CreateWebhook(va, 1, fx.hook())
	check("webhook", err)
	destination, err := fx.s.EventDestinations.CreateEventDestination(va, 1, fx.destination())
	check("event destination", err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO event_forward_dead_letters (destination_id, uuid, event, status_code, error)
		VALUES ($1, gen_random_uuid(), '{}', 400, 'refused')`, destination.ID)
	check("forward dead letter", err)
	flag, err := fx.s.Flags.CreateFlag(va, 1, controlplane.FlagUpdate{Key: ptr("victim-flag")})
	check("flag", err)
	unlinked, err := fx.s.Flags.CreateFlag(va, 1, controlplane.FlagUpdate{Key: ptr("victim-flag-without-feature")})
	check("flag", err)
	fx.unlinked = unlinked.ID
	editors, err := fx.s.Roles.CreateRole(va, controlplane.RoleUpdate{Name: ptr("editors")})
	check("role", err)
	viewers, err := fx.s.Roles.CreateRole(va, controlplane.RoleUpdate{Name: ptr("viewers"), FeatureFlagsAccessLevel: ptr(controlplane.AccessLevelView)})
	check("role", err)
	fx.editors, fx.viewers = editors.ID, viewers.ID
	membership, err := fx.s.Roles.AddMember(va, 1, fx.editors, fx.editor.UUID)
	check("role membership", err)
	fx.editorMembership = membership.ID
	_, err = fx.s.Roles.AddMember(va, 1, fx.viewers, fx.member.UUID)
	check("role membership", err)
	access, err := fx.s.Roles.CreateRoleAccess(va, 1, 1, fx.editors)
	check("role access", err)
	_, err = fx.s.Roles.CreateRoleAccess(va, 1, fx.unlinked, fx.editors)
	check("role access", err)
	_, err = fx.s.ReleasePlans.CreateReleasePlan(va, 1, 1, victimPlan())
	check("release plan", err)
	cohort, err := fx.s.Cohorts.CreateCohort(va, 1, controlplane.CohortUpdate{Name: ptr("victims"), IsStatic: ptr(true)})
	check("cohort", err)
	annotation, err := fx.s.Annotations.CreateAnnotation(va, 1, controlplane.AnnotationUpdate{Content: ptr("victim")})
	check("annotation", err)
	schedule, err := fx.s.Schedules.CreateScheduledChange(va, 1, fx.newSchedule())
	check("scheduled change", err)
	feature, err := fx.s.EarlyAccess.CreateEarlyAccessFeature(va, 1, controlplane.EarlyAccessFeatureUpdate{
		Name: ptr("Victim feature"), Stage: ptr(controlplane.StageBeta), FeatureFlagID: ptr(int64(1))})
	check("early access feature", err)
	fx.feature = feature.ID

	// A policy gating enables, approved by the editor, and the admin's request it filed.
	policy, err := fx.s.Approvals.CreateApprovalPolicy(va, 1, controlplane.ApprovalPolicyUpdate{
		ActionKey: ptr(controlplane.ActionFlagEnable), ApproverConfig: &controlplane.ApproverConfig{Users: []int64{fx.editor.ID}, Quorum: 1}})
	check("approval policy", err)
	fx.policy = policy.ID
	_, err = fx.s.Flags.UpdateFlag(va, 1, fx.unlinked, controlplane.FlagUpdate{Active: ptr(false)})
	check("flag", err)
	_, err = fx.s.Flags.UpdateFlag(va, 1, fx.unlinked, controlplane.FlagUpdate{Active: ptr(true)})
	var gated *controlplane.ApprovalRequiredError
	if !errors.As(err, &gated) {
		t.Fatalf("the victim's gated write: %v", err)
	}
	fx.changeRequest = gated.ChangeRequest.ID

	fx.event = uuid.NewString()
	now := time.Now()
	batch := controlplane.EventBatch{ProjectID: 1, Events: []controlplane.Event{
		{UUID: fx.event, ProjectID: 1, Name: "$pageview", DistinctID: "victim-person", Properties: json.RawMessage(`{}`), Timestamp: now, ReceivedAt: now},
		{UUID: uuid.NewString(), ProjectID: 1, Name: "$groupidentify", DistinctID: "victim-person",
			Properties: json.RawMessage(`{"$group_type": "company", "$group_key": "victim-co"}`), Timestamp: now, ReceivedAt: now},
	}}
	if _, err := postgres.NewEventStore(db, slog.New(slog.NewTextHandler(io.Discard, nil))).Ingest(ctx, []controlplane.EventBatch{batch}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.s.Cohorts.AddPersonsToStaticCohort(va, 1, cohort.ID, controlplane.StaticCohortMembers{DistinctIDs: []string{"victim-person"}}); err != nil {
		t.Fatalf("cohort member: %v", err)
	}
	var person, key int64
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT min(id) FROM persons WHERE project_id = 1),
		(SELECT min(id) FROM personal_api_keys WHERE user_id = 1)`).Scan(&person, &key); err != nil {
		t.Fatal(err)
	}
	fx.attacker = bootstrap("admin@attacker.example", "Attacker")
	if fx.attackerMember, err = postgres.CreateUser(ctx, db, "admin@attacker.example", "member@attacker.example", "", false); err != nil {
		t.Fatal(err)
	}

	// Every int64 argument is 1: check that 1 is the victim's id of every kind.
	for what, id := range map[string]int64{"organisation": fx.admin.OrganizationID, "admin": fx.admin.ID, "project": project.ID,
		"flag": flag.ID, "role access": access.ID, "cohort": cohort.ID, "annotation": annotation.ID, "scheduled change": schedule.ID,
		"webhook": hook.ID, "event destination": destination.ID, "person": person, "personal key": key} {
		if id != 1 {
			t.Fatalf("the victim's %s has id %d, not 1: the victim's objects must be created first, in a fresh database", what, id)
		}
	}
	if fx.attacker.OrganizationID == 1 {
		t.Fatal("the attacker is in the victim's organisation")
	}

	var tables []string
	rows, err := db.Pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, fmt.Sprintf(`SELECT %s, md5(t::text) FROM %s t`, quoteLiteral(name), quoteIdent(name)))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	fx.fingerprintSQL = strings.Join(tables, " UNION ALL ")
	return fx
}

// victimPlan is a valid release plan.
func victimPlan() controlplane.NewReleasePlan {
	return controlplane.NewReleasePlan{Steps: []controlplane.ReleaseStep{{RolloutPercentage: 10}},
		Guardrails: []controlplane.Guardrail{{Event: "$exception"}}}
}

// nothingID is the id of no object.
const nothingID = 1 << 40

func quoteIdent(s string) string   { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

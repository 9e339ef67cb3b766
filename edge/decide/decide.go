// Package decide serves /decide and /flags at the edge. A request goes through one straight
// line: decode the body, parse it, find the project, add GeoIP and stored person and group
// properties where flags need them, evaluate the project's compiled snapshot, and encode the
// answer in the shape the SDK asked for.
package decide

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/admit"
	"github.com/flagedge/flagedge/edge/answercache"
	"github.com/flagedge/flagedge/edge/apierror"
	"github.com/flagedge/flagedge/edge/geocache"
	"github.com/flagedge/flagedge/edge/persons"
	"github.com/flagedge/flagedge/edge/reqbody"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/clientip"
	"github.com/flagedge/flagedge/shared/event"
	"github.com/flagedge/flagedge/shared/flags"
)

// MaxBodyBytes bounds a decoded /decide body; requests carry one user's properties.
const MaxBodyBytes = 1 << 20

// Limits returns what one /decide or /flags body, or OFREP evaluation, may hold (docs/api.md,
// "Limits"), checked by AdmitBody before a body of more than smallBody bytes is parsed; a
// smaller body cannot cost much whatever it holds, and is not scanned twice. PostHog
// publishes none of these: they are far above what an SDK sends for one user.
func Limits() event.Limits {
	return event.Limits{
		MaxEvents:      100_000, // a body is one object: nothing counts as events
		MaxValues:      100_000,
		MaxProperties:  10_000,
		MaxDepth:       32,
		MaxKeyBytes:    1 << 10,
		MaxStringBytes: 64 << 10,
	}
}

// smallBody is the size up to which a body is parsed without Scan and without reserving its
// cost: at most a few tens of kilobytes of parsed values.
const smallBody = 4 << 10

// What parsing a body costs beyond its text (the parser's copy): per value, the parsed
// value and its entry in the property maps.
const costPerValue = 256

var errBodyTooLarge = apierror.TooLarge("The request body is over 1 MB.")

// largeBody is the size above which a request's scratch is dropped after use rather than
// pooled, so that the pool does not keep the memory of the largest body it ever parsed.
const largeBody = 64 << 10

// Handler serves /decide and /flags.
type Handler struct {
	state   *state.Holder
	persons *persons.Store
	geo     *geocache.Locator
	ips     *clientip.Resolver
	budget  *reqbody.Budget    // nil: unbounded
	limiter *admit.Limiter     // nil: no rate limits
	answers *answercache.Cache // nil: every answer is computed
	log     *slog.Logger
	pool    sync.Pool // *scratch
}

// scratch is per-request memory, reused across requests.
type scratch struct {
	scan       scanner
	in         input
	person     flags.Properties
	groupProps map[string]flags.Properties
	results    []flags.Result
	out        []byte
	lease      reqbody.Lease // of the in-flight budget, here so that it is not allocated
	want       []bool        // selection's marks, reused
	// body is the decoded request body (nil when there is none), valid until the request
	// ends; the answer's key holds it.
	body []byte
	// key is the answer's key in the answer cache: the request's inputs (keyLen bytes), then
	// what the stored layers were (keyed, as they are now, to look for a kept answer; used,
	// as evaluation read them, to keep the answer computed).
	key         answercache.Key
	keyLen      int
	keyed, used storedRead
	slots       []int32   // the answer's evaluations, for the answer cache
	until       time.Time // when the answer's date comparisons could change (flags.Request.Until)
}

// storedRead is what an answer read of the stored layers: the revisions of the person (when
// the flags need it) and of the groups whose stored properties they need.
type storedRead struct {
	person    bool
	personRev persons.Revision
	groups    []persons.GroupRef // with their revisions
	changed   bool               // a hash key override was written: the answer is not kept
}

func (r *storedRead) reset() {
	*r = storedRead{groups: r.groups[:0]}
}

// appendTo appends the read to an answer's key.
func (r *storedRead) appendTo(k *answercache.Key) {
	if r.person {
		k.Uint64(1)
		k.Uint64(r.personRev.Stored)
		k.Uint64(r.personRev.Overlay)
	} else {
		k.Uint64(0)
	}
	k.Uint64(uint64(len(r.groups)))
	for i := range r.groups {
		k.Uint64(uint64(r.groups[i].TypeIndex))
		k.Uint64(r.groups[i].Revision)
	}
}

// NewHandler returns the decide handler. store, locator, ips, budget and limiter may be nil
// (no stored properties, no GeoIP, X-Forwarded-For trusted, no in-flight budget, no rate
// limits).
func NewHandler(h *state.Holder, store *persons.Store, locator *geocache.Locator, ips *clientip.Resolver, budget *reqbody.Budget,
	limiter *admit.Limiter, log *slog.Logger) *Handler {
	d := &Handler{state: h, persons: store, geo: locator, ips: ips, budget: budget, limiter: limiter, log: log}
	d.pool.New = func() any {
		return &scratch{out: make([]byte, 0, 4096), person: flags.Properties{}, groupProps: map[string]flags.Properties{}}
	}
	return d
}

// KeepAnswers makes the handler answer returning users from c (nil: never); call it before
// serving.
func (d *Handler) KeepAnswers(c *answercache.Cache) { d.answers = c }

// Endpoint says which path a request came in on.
type Endpoint int

// The endpoints.
const (
	Decide Endpoint = iota
	Flags
)

// Serve answers a /decide or /flags request, or returns the *apierror.Error to answer.
func (d *Handler) Serve(ctx *fasthttp.RequestCtx, ep Endpoint) error {
	s := d.pool.Get().(*scratch)
	s.lease = d.budget.Lease()
	large, err := decodeInto(ctx, s, &s.lease)
	defer d.done(s, large)
	if err != nil {
		return err
	}
	project, err := d.project(ctx, &s.in)
	if err != nil {
		return err
	}
	if s.in.distinctID == "" {
		return apierror.MissingDistinctID
	}
	rt := s.in.runtime
	if rt == flags.RuntimeUnknown && project.Snapshot.Filters(rt, nil) { // some flag is for one runtime: tell the request's
		rt = RequestRuntime(&ctx.Request.Header, rt)
	}
	s.in.runtime, s.in.selective = rt, true
	sh := shapeOf(ctx.QueryArgs(), ep)
	req := d.request(ctx, &s.in)
	keep := d.answers != nil && d.keyRequest(ctx, s, project, sh)
	if keep && d.readStored(s, project, &req) {
		if e := d.answers.Get(&s.key); e != nil {
			project.Counts.CountSlots(e.Slots)
			writeKept(ctx, s, project, e)
			return nil
		}
	}
	lookupFailed := false
	s.results = s.results[:0]
	s.used.reset()
	if s.until = (time.Time{}); keep {
		req.Until = &s.until
	}
	if !s.in.disableFlags {
		lookupFailed = d.gather(ctx, project, &req, &s.in, &s.used)
		s.results = project.Snapshot.Evaluate(&req, s.results)
	}
	want := selection(s.results, project.Snapshot, &s.in, rt, &s.want)
	errored := answerErrored(s.results, want, lookupFailed)
	Count(project, s.results, want)
	s.out = encode(s.out[:0], project, sh, s.results, want, errored)
	if keep && !errored && !s.used.changed && (s.until.IsZero() || s.until.After(req.Now)) {
		// Kept under what evaluation read: a request that finds the stored layers so gets it.
		s.key.Truncate(s.keyLen)
		s.used.appendTo(&s.key)
		s.slots = project.Counts.AnswerSlots(s.slots[:0], s.results, want)
		kept, fresh := s.out, false
		if sh.flagsV2 {
			kept, fresh = s.out[:bytes.LastIndex(s.out, []byte(freshMembers))], true
		}
		d.answers.Put(&s.key, kept, fresh, s.slots, s.until)
	} else if d.answers != nil {
		d.answers.Bypass()
	}
	ctx.SetContentType("application/json")
	ctx.Response.Header.SetCanonical(state.VersionHeader, project.VersionText)
	ctx.SetBody(s.out)
	return nil
}

// writeKept answers with a kept answer, as the answer computed would be written: with fresh
// members when it has them, else its bytes as they are (immutable, so not copied).
func writeKept(ctx *fasthttp.RequestCtx, s *scratch, project *state.Project, e *answercache.Entry) {
	ctx.SetContentType("application/json")
	ctx.Response.Header.SetCanonical(state.VersionHeader, project.VersionText)
	if !e.Fresh {
		ctx.Response.SetBodyRaw(e.Answer)
		return
	}
	ctx.Response.ResetBody()
	ctx.Response.AppendBody(e.Answer) // one copy, into the response
	s.out = appendFresh(s.out[:0])
	ctx.Response.AppendBody(s.out)
}

// keyRequest writes in s.key the inputs of the answer that the request carries (the list is
// in edge/answercache's documentation) and reports whether the answer may be kept or given
// from the cache: the snapshot matches no pattern with a time limit.
func (d *Handler) keyRequest(ctx *fasthttp.RequestCtx, s *scratch, project *state.Project, sh shape) bool {
	if project.Snapshot.TimeLimited() {
		return false
	}
	k := &s.key
	k.Reset()
	k.Uint64(uint64(project.ID))
	k.Uint64(project.Generation)
	k.Uint64(sh.bits())
	k.Uint64(uint64(s.in.runtime))
	k.Bytes(s.body)
	if d.geo != nil && !s.in.geoipDisable {
		var buf [16]byte
		ip, _ := d.clientIP(ctx).Unmap().AppendBinary(buf[:0])
		k.Bytes(ip)
	} else {
		k.Bytes(nil)
	}
	s.keyLen = k.Len()
	return true
}

// readStored appends to s.key what the stored person and groups that the flags need are at
// the edge now, as gather would read them, and reports whether it can tell without a look-up
// (they are cached, or the control plane stores nothing about them) and without a hash key
// override to write: else no kept answer can be known current.
func (d *Handler) readStored(s *scratch, project *state.Project, req *flags.Request) bool {
	s.keyed.reset()
	if d.persons != nil && !s.in.disableFlags {
		snap := project.Snapshot
		if s.keyed.person = needsPerson(project, req); s.keyed.person {
			rev, overrides, ok := d.persons.PersonRevision(project.ID, project.Version, snap.UsesStaticCohorts(), req.DistinctID)
			if !ok || writesOverrides(project, s.in.anonDistinctID, req.DistinctID, overrides) {
				return false
			}
			s.keyed.personRev = rev
		}
		s.keyed.groups = groupRefs(s.keyed.groups, snap, req)
		for i := range s.keyed.groups {
			r := &s.keyed.groups[i]
			rev, ok := d.persons.GroupRevision(project.ID, *r)
			if !ok {
				return false
			}
			r.Revision = rev
		}
	}
	s.keyed.appendTo(&s.key)
	return true
}

// done gives back what a request held: the scratch to the pool (unless it parsed a large
// body) and its lease of the in-flight budget.
func (d *Handler) done(s *scratch, large bool) {
	s.lease.Release()
	if !large {
		d.pool.Put(s)
	}
}

// decodeInto decodes the request body (or GET ?data=) in any of the SDKs' encodings and
// parses it into s.in, holding what a large body costs in lease. It reports whether the
// body was large.
func decodeInto(ctx *fasthttp.RequestCtx, s *scratch, lease *reqbody.Lease) (large bool, err error) {
	s.body = nil
	var raw []byte
	if ctx.IsGet() {
		raw = ctx.QueryArgs().Peek("data") // bounded by the header size limit
	} else if raw, err = reqbody.Read(ctx, MaxBodyBytes, lease); err != nil {
		return false, reqbody.AsAPIError(err, errBodyTooLarge)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return false, s.parse(nil) // no body: the token may come as ?token=, and distinct_id is missing
	}
	decoded, err := reqbody.Decode(ctx, raw, MaxBodyBytes, lease)
	if err != nil {
		return false, reqbody.AsAPIError(err, errBodyTooLarge)
	}
	if err := AdmitBody(decoded, lease); err != nil {
		return false, reqbody.AsAPIError(err, errBodyTooLarge)
	}
	if err := s.parse(decoded); err != nil {
		return false, apierror.Malformed(err.Error())
	}
	s.body = decoded
	return len(decoded) > largeBody, nil
}

// AdmitBody checks a decoded body of more than smallBody bytes against Limits and reserves in
// lease what parsing it costs (the parser's copy and costPerValue a value, which also covers
// OFREP's encoding/json: 100 to 225 bytes a value, measured), so that a body full of tiny
// values is refused for its bytes alone and the bodies in flight stay within the budget. A
// smaller body passes unscanned. Its errors are Scan's *event.LimitError and the lease's
// reqbody.ErrBusy. OFREP's evaluations are admitted by it too: one context is held to the
// same limits and budget whichever protocol sends it.
func AdmitBody(decoded []byte, lease *reqbody.Lease) error {
	if len(decoded) <= smallBody {
		return nil
	}
	st, err := event.Scan(decoded, Limits())
	if err != nil {
		return err
	}
	return lease.Reserve(len(decoded) + costPerValue*st.Values)
}

// Budget returns the in-flight budget /decide and /flags reserve from (nil: unbounded). OFREP's
// evaluations reserve from it too, so that --max-inflight-bytes bounds both.
func (d *Handler) Budget() *reqbody.Budget { return d.budget }

// project finds the project of the request's token (the body's, else ?token=).
func (d *Handler) project(ctx *fasthttp.RequestCtx, in *input) (*state.Project, error) {
	token := in.token
	if token == "" {
		token = bytesString(ctx.QueryArgs().Peek("token"))
	}
	if token == "" {
		return nil, apierror.NoAPIKey
	}
	if !d.state.Ready() {
		return nil, apierror.NotReady
	}
	project := d.state.ByToken(token)
	if project == nil {
		return nil, apierror.InvalidAPIKey
	}
	if d.limiter != nil {
		if r, ok := d.limiter.Project(project.ID, time.Now()); !ok {
			return nil, apierror.RateLimited(r.RetryAfter)
		}
	}
	return project, nil
}

// Context is one evaluation asked for by another protocol than /flags (OFREP): what a /flags
// body carries. Evaluate answers it by the path /flags takes, so that both give the same
// answers for the same context.
type Context struct {
	DistinctID       string
	PersonProperties flags.Properties
	Groups           map[string]string
	GroupProperties  map[string]flags.Properties
	GeoIPDisable     bool
}

// Evaluate evaluates project's flags for c as /flags does (GeoIP, the stored person and group
// properties the flags need, the engine) into results, reused when large enough; a flag that
// could not be computed is Failed.
func (d *Handler) Evaluate(ctx *fasthttp.RequestCtx, project *state.Project, c *Context, results []flags.Result) []flags.Result {
	in := input{distinctID: c.DistinctID, personProperties: c.PersonProperties, groups: c.Groups,
		groupProperties: c.GroupProperties, geoipDisable: c.GeoIPDisable}
	req := d.request(ctx, &in)
	d.gather(ctx, project, &req, &in, &storedRead{})
	return project.Snapshot.Evaluate(&req, results)
}

// request is the engine's request for the parsed body, with the GeoIP properties of the
// client's address; gather adds the stored layers.
func (d *Handler) request(ctx *fasthttp.RequestCtx, in *input) flags.Request {
	// Relative dates count back from the time fasthttp read when the request came (the
	// engine would read the clock again), in UTC as PostHog counts them: months and years
	// stepped in a zone with daylight saving would last an hour more or less than the answer
	// cache's bounds allow for.
	req := flags.Request{DistinctID: in.distinctID, DeviceID: in.deviceID, PersonProperties: in.personProperties,
		GroupProperties: in.groupProperties, Selective: in.selective, Runtime: in.runtime, EvaluationContexts: in.contexts,
		Now: ctx.Time().UTC()}
	if len(in.groups) > 0 {
		req.Groups = in.groups
	}
	if !in.geoipDisable && d.geo != nil {
		req.GeoIP = d.geo.Lookup(d.clientIP(ctx))
	}
	return req
}

// clientIP is the request's client address, as --trusted-proxies finds it.
func (d *Handler) clientIP(ctx *fasthttp.RequestCtx) netip.Addr {
	return d.ips.ClientIP(ctx.Request.Header.PeekAll("X-Forwarded-For"), ctx.RemoteIP())
}

// answerErrored tells an answer's errorsWhileComputingFlags: a flag it gives could not be
// computed, or, when it gives every flag, a look-up failed (PostHog's server: the database
// was needed for the flags asked for and failed). Of an answer that leaves flags out
// (flag_keys_to_evaluate, runtime, evaluation contexts) only its own flags count: a look-up
// that only a left-out flag needed is not its error.
func answerErrored(results []flags.Result, want []bool, lookupFailed bool) bool {
	if lookupFailed && want == nil {
		return true
	}
	for i := range results {
		if results[i].Failed && wanted(want, i) {
			return true
		}
	}
	return false
}

// shape is the form of an answer, as the endpoint and its ?v= and ?config= ask for it.
type shape struct {
	flagsV2 bool
	config  bool // flagsV2: with the client configuration members
	version int  // not flagsV2: the /decide version, 1 to 3 (appendDecide reads no other)
}

func shapeOf(args *fasthttp.Args, ep Endpoint) shape {
	version, _ := strconv.Atoi(bytesString(args.Peek("v")))
	switch {
	case ep == Flags && (version >= 2 || (version == 0 && !args.Has("config"))):
		return shape{flagsV2: true, config: args.GetBool("config")}
	case ep == Flags:
		return shape{version: 3}
	case version >= 4:
		return shape{flagsV2: true, config: true}
	}
	return shape{version: min(max(version, 1), 3)}
}

// bits is the shape as a number, for the answer's key.
func (sh shape) bits() uint64 {
	n := uint64(sh.version) << 2
	if sh.flagsV2 {
		n |= 1
	}
	if sh.config {
		n |= 2
	}
	return n
}

// encode writes the answer in its shape. The /flags shape gives each flag's metadata the
// snapshot version too.
func encode(b []byte, project *state.Project, sh shape, results []flags.Result, want []bool, errored bool) []byte {
	members, keys := project.ConfigMembers, project.AnswerKeys
	if sh.flagsV2 {
		return appendFlagsV2(b, members, project.VersionText, keys, results, want, errored, sh.config)
	}
	return appendDecide(b, members, keys, results, project.Snapshot.Payloaded(), want, errored, sh.version)
}

// needsPerson reports whether evaluating req needs the stored person: its properties or
// static cohorts, or its hash key overrides for experience continuity.
func needsPerson(project *state.Project, req *flags.Request) bool {
	return len(project.ContinuityFlags) > 0 || project.Snapshot.NeedsPersonLookup(req.PersonProperties, req.GeoIP)
}

// writesOverrides reports whether a request with anonDistinctID makes the person's hash key
// overrides (as stored: overrides) be written: after an identify, the flags with experience
// continuity keep hashing the anonymous id.
func writesOverrides(project *state.Project, anonDistinctID, distinctID string, overrides map[string]string) bool {
	return len(project.ContinuityFlags) > 0 && anonDistinctID != "" && anonDistinctID != distinctID && !covers(overrides, project.ContinuityFlags)
}

// groupRefs returns, in refs' memory, the groups of the request whose stored properties its
// flags need.
func groupRefs(refs []persons.GroupRef, snap *flags.Snapshot, req *flags.Request) []persons.GroupRef {
	refs = refs[:0]
	for i := range 5 {
		name := snap.GroupTypeName(i)
		if key, ok := req.Groups[name]; ok && name != "" && snap.NeedsGroupLookup(i, req.GroupProperties[name]) {
			refs = append(refs, persons.GroupRef{TypeIndex: i, Name: name, Key: key})
		}
	}
	return refs
}

// gather fills the request's stored layers (person, groups, continuity overrides) when the
// project's flags need them, and records in read what it read of them. It reports whether a
// look-up failed.
func (d *Handler) gather(ctx context.Context, project *state.Project, req *flags.Request, in *input, read *storedRead) (errored bool) {
	snap := project.Snapshot
	if d.persons == nil {
		return false
	}
	if read.person = needsPerson(project, req); read.person {
		person, err := d.persons.Person(ctx, project.ID, project.Version, snap.UsesStaticCohorts(), req.DistinctID)
		if err != nil {
			d.log.Warn("person look-up failed", "project", project.ID, "err", err)
			req.PersonLookupFailed, errored = true, true
		} else {
			req.StoredPerson, req.StaticCohorts, req.HashKeyOverrides = person.Properties, person.StaticCohorts, person.HashKeyOverrides
			read.personRev = person.Revision
		}
		if anon := in.anonDistinctID; writesOverrides(project, anon, req.DistinctID, req.HashKeyOverrides) {
			read.changed = true
			overrides, err := d.persons.SetHashKeyOverrides(ctx, project.ID, req.DistinctID, anon, project.ContinuityFlags)
			if err != nil {
				d.log.Warn("hash key override failed", "project", project.ID, "err", err)
				errored = true
				// Hash the anonymous id anyway: it is what the write would have recorded.
				overrides = make(map[string]string, len(project.ContinuityFlags))
				for _, k := range project.ContinuityFlags {
					overrides[k] = anon
				}
			}
			req.HashKeyOverrides = overrides
		}
	}
	refs := groupRefs(read.groups, snap, req)
	read.groups = refs
	if len(refs) > 0 {
		groups, err := d.persons.Groups(ctx, project.ID, refs)
		if err != nil {
			d.log.Warn("group look-up failed", "project", project.ID, "err", err)
			for _, r := range refs {
				req.GroupLookupFailed |= 1 << r.TypeIndex
			}
			return true
		}
		req.StoredGroups = groups
	}
	return errored
}

func covers(overrides map[string]string, keys []string) bool {
	for _, k := range keys {
		if _, ok := overrides[k]; !ok {
			return false
		}
	}
	return true
}

// RequestRuntime is the runtime a request comes from, as PostHog's server finds it: the
// body's evaluation_runtime (explicit), else told from the User-Agent and the headers only
// browsers send; RuntimeUnknown when neither tells.
func RequestRuntime(h *fasthttp.RequestHeader, explicit flags.Runtime) flags.Runtime {
	if explicit != flags.RuntimeUnknown {
		return explicit
	}
	browser := h.Peek("Origin") != nil || h.Peek("Referer") != nil || h.Peek("Sec-Fetch-Mode") != nil || h.Peek("Sec-Fetch-Site") != nil
	return flags.DetectRuntime(bytesString(h.UserAgent()), browser)
}

// selection marks, by result index, the flags a request gets: those its flag_keys_to_evaluate
// names (every flag when it names none) that the snapshot selects for its runtime and
// evaluation contexts (flags.Snapshot.Selected). It is nil (every flag) when nothing is left
// out, as for most requests: the snapshot knows whether any flag is for one runtime or has
// evaluation tags. One look-up per key, so that a long list costs its length and not its
// length times the project's flags in every pass over the results.
func selection(results []flags.Result, snap *flags.Snapshot, in *input, rt flags.Runtime, marks *[]bool) []bool {
	keys, filtered := in.flagKeysToEvaluate, snap.Filters(rt, in.contexts)
	if len(keys) == 0 && !filtered {
		return nil
	}
	want := slices.Grow((*marks)[:0], len(results))[:len(results)]
	if len(keys) == 0 {
		for i := range want {
			want[i] = true
		}
	} else {
		clear(want)
		for _, k := range keys {
			// Of flags sharing a key, Lookup finds the last: mark the others too.
			for i := snap.Lookup(k); i >= 0 && i < len(results) && results[i].Key == k; i-- {
				want[i] = true
			}
		}
	}
	if filtered {
		for i := range want {
			want[i] = want[i] && snap.Selected(i, rt, in.contexts)
		}
	}
	*marks = want
	return want
}

// Count adds the evaluations an answer gives to the project's counters (see edge/evalcount):
// every flag answered — active, wanted (every flag when want is nil; see selection), and
// computed. OFREP counts its answers with it too.
func Count(project *state.Project, results []flags.Result, want []bool) {
	project.Counts.CountAnswer(results, want)
}

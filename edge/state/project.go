// Package state holds what an edge serves: the latest compiled snapshot of every project
// behind an atomic pointer (never a lock on the read path), its copy on local disk, and the
// gRPC client that keeps both current from the control plane.
package state

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flagedge/flagedge/edge/clientconfig"
	"github.com/flagedge/flagedge/edge/evalcount"
	"github.com/flagedge/flagedge/edge/jsonenc"
	"github.com/flagedge/flagedge/shared/flags"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// Project is one project as the edge serves it: compiled flags and the bodies it answers
// with, prepared once per snapshot version.
type Project struct {
	ID      int64
	Version int64
	// Generation tells this compilation from every other the holder made, of any project
	// and version: one version may be compiled twice with different contents (a control
	// plane restored from a backup hands out versions again), so what is derived from a
	// snapshot and kept beyond it (edge/answercache) is keyed on the generation.
	Generation uint64
	// VersionText is Version in decimal, prepared once so that every answer computed from this
	// snapshot can carry it (VersionHeader) without formatting or allocating.
	VersionText []byte
	Name        string
	Token       string
	Snapshot    *flags.Snapshot
	// ContinuityFlags are the keys of active flags with experience continuity.
	ContinuityFlags []string
	// Payloads maps flag keys to their "true" payload (compact JSON), for remote config.
	Payloads map[string][]byte
	BuiltAt  time.Time
	// ClientConfig is the project's configuration of browser SDKs. ConfigMembers are its
	// members as /decide and /flags write them, RemoteConfig the /array/{token}/config object
	// and RemoteConfigJS the config.js script: all built once here, so answering copies bytes.
	ClientConfig   clientconfig.Config
	ConfigMembers  []byte
	RemoteConfig   []byte
	RemoteConfigJS []byte
	// EarlyAccessFeatures are the project's early access features, every stage, in the
	// control plane's order.
	EarlyAccessFeatures []EarlyAccessFeature
	// AnswerKeys are the keys of the snapshot's flags as JSON strings, by result index
	// (AnswerKeys[i] is Snapshot.Key(i) quoted and escaped), written once here so that an
	// answer copies them instead of escaping 50 keys twice per request. Each is followed, in
	// its capacity, by `:true`: k[:cap(k)] is the answer's member for an enabled boolean flag
	// and k[:cap(k)-4] the start of any other member, one copy each.
	AnswerKeys [][]byte
	// Counts are the evaluation counters of the snapshot's flags (nil when the edge does not
	// count): Counts.Flag(i) counts the i-th result of Snapshot.Evaluate.
	Counts *evalcount.Project

	// definitions are the SDK definitions bodies, built from the snapshot's source on first
	// request: most edges never serve them, and they are the largest part.
	definitions [2]definitions // without ([0]) and with ([1]) cohorts

	secret    [sha256.Size]byte
	readKeys  map[[sha256.Size]byte]bool // key hash → may read definitions
	hasSecret bool
}

// VersionHeader names the header that carries the snapshot version an answer was computed
// from (VersionText), on every edge answer that depends on flags, and on the control plane's
// flag writes (the project version that contains the write). It is in canonical form, for
// fasthttp's ResponseHeader.SetCanonical.
var VersionHeader = []byte("X-Flagedge-Snapshot-Version")

// EarlyAccessFeature is one early access feature, as the public list shows it.
type EarlyAccessFeature struct {
	ID               string
	Name             string
	Description      string
	Stage            string
	DocumentationURL string
	// FlagKey is the key of the feature's flag, or "" when it has none.
	FlagKey string
}

// Access says what a bearer credential may do with a project's flag definitions.
type Access int

// Access levels.
const (
	AccessUnknown   Access = iota // no such key: 401
	AccessForbidden               // a valid key without the scope: 403
	AccessAllowed
)

type definitions struct {
	once sync.Once
	body []byte
	etag string
	err  error
}

// Definitions returns the SDK flag definitions body (with cohorts sent as property groups when
// sendCohorts) and its entity tag, built once per snapshot version.
func (p *Project) Definitions(sendCohorts bool) (body []byte, etag string, err error) {
	d := &p.definitions[0]
	if sendCohorts {
		d = &p.definitions[1]
	}
	d.once.Do(func() {
		d.body, d.err = flags.DefinitionsBody(p.ID, p.Snapshot.Source(), sendCohorts)
		d.etag = flags.ETag(d.body)
	})
	return d.body, d.etag, d.err
}

// DefinitionsAccess checks a bearer credential (a personal key phx_… or the project's secret
// key phs_…) against the hashes the snapshot carries.
func (p *Project) DefinitionsAccess(bearer string) Access {
	sum := sha256.Sum256([]byte(bearer))
	if strings.HasPrefix(bearer, "phs_") {
		if p.hasSecret && subtle.ConstantTimeCompare(sum[:], p.secret[:]) == 1 {
			return AccessAllowed
		}
		return AccessUnknown
	}
	canRead, known := p.readKeys[sum]
	switch {
	case !known:
		return AccessUnknown
	case !canRead:
		return AccessForbidden
	}
	return AccessAllowed
}

// compileProject prepares a snapshot for serving.
func compileProject(pb *syncpb.ProjectSnapshot) (*Project, error) {
	def := flags.Project{GroupTypes: map[int]string{}}
	p := &Project{ID: pb.ProjectId, Version: pb.Version, VersionText: strconv.AppendInt(nil, pb.Version, 10), Name: pb.Name, Token: pb.ApiToken,
		BuiltAt: time.UnixMilli(pb.BuiltAtUnixMs), Payloads: map[string][]byte{}, readKeys: map[[sha256.Size]byte]bool{}}
	for _, f := range pb.Flags {
		def.Flags = append(def.Flags, flags.FlagDefinition{ID: f.Id, Key: f.Key, Name: f.Name, Active: f.Active,
			Version: int(f.Version), EnsureExperienceContinuity: f.EnsureExperienceContinuity, Filters: f.Filters,
			EvaluationRuntime: f.EvaluationRuntime, EvaluationTags: f.EvaluationTags, BucketingIdentifier: f.BucketingIdentifier})
		if f.Active && f.EnsureExperienceContinuity {
			p.ContinuityFlags = append(p.ContinuityFlags, f.Key)
		}
	}
	for _, c := range pb.Cohorts {
		def.Cohorts = append(def.Cohorts, flags.CohortDefinition{ID: c.Id, Static: c.IsStatic, Filters: c.Filters})
	}
	for i, name := range pb.GroupTypes {
		def.GroupTypes[int(i)] = name
	}
	snap, err := flags.Compile(def)
	if err != nil {
		return nil, fmt.Errorf("project %d version %d: %w", pb.ProjectId, pb.Version, err)
	}
	p.Snapshot = snap
	p.AnswerKeys = answerKeys(snap)
	for _, f := range pb.Flags {
		parsed, err := flags.ParseFilters(f.Filters)
		if err == nil {
			if payload, ok := parsed.Payloads["true"]; ok {
				p.Payloads[f.Key] = payload
			}
		}
	}
	if cc := pb.ClientConfig; cc != nil {
		p.ClientConfig = clientconfig.Config{AutocaptureOptOut: cc.AutocaptureOptOut, SessionRecordingOptIn: cc.SessionRecordingOptIn,
			HeatmapsOptIn: cc.HeatmapsOptIn, CaptureConsoleLogOptIn: cc.CaptureConsoleLogOptIn,
			CapturePerformanceOptIn: cc.CapturePerformanceOptIn, AutocaptureExceptionsOptIn: cc.AutocaptureExceptionsOptIn}
	}
	p.ConfigMembers = clientconfig.Members(p.ClientConfig)
	p.RemoteConfig = clientconfig.Remote(p.Token, p.ConfigMembers)
	p.RemoteConfigJS = clientconfig.RemoteJS(p.Token, p.RemoteConfig)
	for _, f := range pb.EarlyAccessFeatures {
		p.EarlyAccessFeatures = append(p.EarlyAccessFeatures, EarlyAccessFeature{ID: f.Id, Name: f.Name, Description: f.Description,
			Stage: f.Stage, DocumentationURL: f.DocumentationUrl, FlagKey: f.FlagKey})
	}
	if len(pb.SecretTokenSha256) == sha256.Size {
		copy(p.secret[:], pb.SecretTokenSha256)
		p.hasSecret = true
	}
	for _, list := range []struct {
		hashes  [][]byte
		canRead bool
	}{{pb.OtherKeySha256, false}, {pb.ReadKeySha256, true}} {
		for _, h := range list.hashes {
			if len(h) == sha256.Size {
				p.readKeys[[sha256.Size]byte(h)] = list.canRead
			}
		}
	}
	return p, nil
}

// answerKeys encodes the snapshot's flag keys as JSON strings, in one block of memory, each
// followed by memberTrue beyond its length (within its capacity; see AnswerKeys).
func answerKeys(snap *flags.Snapshot) [][]byte {
	var all []byte
	ends := make([]int, snap.Len())
	for i := range ends {
		all = jsonenc.AppendString(all, snap.Key(i))
		all = append(all, memberTrue...)
		ends[i] = len(all)
	}
	keys := make([][]byte, len(ends))
	start := 0
	for i, end := range ends {
		keys[i] = all[start : end-len(memberTrue) : end]
		start = end
	}
	return keys
}

// memberTrue follows each of AnswerKeys.
const memberTrue = ":true"

// countDefinitions lists the snapshot's flags in evaluation order with the values they can
// take, for their counters.
func countDefinitions(snap *flags.Snapshot) []evalcount.Definition {
	src := snap.Source()
	defs := make([]evalcount.Definition, len(src.Flags))
	for i, f := range src.Flags {
		defs[i].Key = f.Key
		parsed, err := flags.ParseFilters(f.Filters)
		if err != nil {
			continue
		}
		if parsed.Multivariate != nil {
			for _, v := range parsed.Multivariate.Variants {
				defs[i].Variants = append(defs[i].Variants, v.Key)
			}
		}
		for _, h := range parsed.HoldoutGroups {
			if h.Variant != nil {
				defs[i].Variants = append(defs[i].Variants, *h.Variant)
			}
		}
	}
	return defs
}

package flags

import (
	"strings"
)

type source uint8

const (
	sourcePerson source = iota
	sourceGroup
	sourceCohort
	sourceFlag
)

type opcode uint8

const (
	opExact opcode = iota
	opIsNot
	opIsSet
	opIsNotSet
	opIContains
	opNotIContains
	opRegex
	opNotRegex
	opGT
	opGTE
	opLT
	opLTE
	opDateBefore
	opDateAfter
	opDateExact
	opStartsWith
	opEndsWith
	opNotStartsWith
	opNotEndsWith
	opSemverEq
	opSemverNeq
	opSemverGT
	opSemverGTE
	opSemverLT
	opSemverLTE
	opSemverRange // tilde, caret and wildcard, as a range
	opIn
	opNotIn
	opFlagEvaluatesTo
)

var opcodes = map[string]opcode{
	OpExact: opExact, OpIsNot: opIsNot, OpIsSet: opIsSet, OpIsNotSet: opIsNotSet,
	OpIContains: opIContains, OpNotIContains: opNotIContains, OpRegex: opRegex, OpNotRegex: opNotRegex,
	OpGT: opGT, OpGTE: opGTE, OpLT: opLT, OpLTE: opLTE,
	OpDateBefore: opDateBefore, OpDateAfter: opDateAfter, OpDateExact: opDateExact,
	OpStartsWith: opStartsWith, OpEndsWith: opEndsWith, OpNotStartsWith: opNotStartsWith, OpNotEndsWith: opNotEndsWith,
	OpSemverEq: opSemverEq, OpSemverNeq: opSemverNeq, OpSemverGT: opSemverGT, OpSemverGTE: opSemverGTE,
	OpSemverLT: opSemverLT, OpSemverLTE: opSemverLTE, OpSemverTilde: opSemverRange, OpSemverCaret: opSemverRange,
	OpSemverWildcard: opSemverRange, OpIn: opIn, OpNotIn: opNotIn, OpFlagEvaluatesTo: opFlagEvaluatesTo,
}

// whenMissing is what an operator answers when the property is absent: the negative
// operators match, the others do not.
func (op opcode) whenMissing() bool {
	switch op {
	case opIsNot, opIsNotSet, opNotIContains, opNotRegex, opNotStartsWith, opNotEndsWith, opNotIn:
		return true
	}
	return false
}

// matcher is one compiled property filter: its operand parsed once into the forms its
// operator compares with.
type matcher struct {
	key    string
	lowers []string       // exact/is_not: lower-case string forms of the operand(s)
	lower  string         // icontains…not_ends_with: the operand, ASCII letters lower-cased
	num    float64        // gt…lte: the operand as a number (numOK)
	re     *compiledRegex // nil for an invalid pattern: never matches
	cohort *cohort

	// *rareOperand holds the operands of date, semver and flag filters; nil for the others,
	// which are most filters: it keeps a matcher small, and a snapshot holds many.
	*rareOperand

	groupIndex int
	// personSlot is, for a person property, 1 + the index of its key in the snapshot's
	// person keys when below maxPersonSlots (an evaluation keeps the key's value there once
	// read: flags test the same property with many filters), else 0.
	personSlot uint8
	source     source
	op         opcode
	negation   bool
	boolMode   bool // exact/is_not compare truth values
	boolWant   bool // in boolMode: the operand's truth
	numOK      bool
	valid      bool // false when the operand cannot be read (the filter then matches nothing)
}

// rareOperand is the part of a matcher that only some operators use.
type rareOperand struct {
	date       dateFilter
	version    semver
	vrange     versionReq
	flagIndex  int // -1: an unknown flag or a cycle: never matches
	expectBool bool
	expectStr  string
	expectIsS  bool
}

// newMatcher compiles a filter. Only what makes a filter meaningless is an error (an unknown
// operator, or an operator of another property type); an operand the operator cannot read
// compiles into a filter that matches nothing, as on PostHog's server. ValidateOperator is
// the stricter check the API applies when a flag is saved.
func newMatcher(p Property) (*matcher, error) {
	typ := p.Type
	if typ == "" {
		typ = TypePerson
	}
	opName := defaultOperator(typ, p.Operator)
	op, known := opcodes[opName]
	switch {
	case !known:
		return nil, invalidf("unknown operator %q.", opName)
	case typ == TypeCohort && op != opIn && op != opNotIn,
		typ == TypeFlag && op != opFlagEvaluatesTo,
		typ != TypeCohort && typ != TypeFlag && (op == opIn || op == opNotIn || op == opFlagEvaluatesTo):
		return nil, invalidf("operator %s is not for %s filters.", opName, typ)
	}
	m := &matcher{op: op, negation: p.Negation, key: p.Key, valid: true}
	switch {
	case typ == TypeFlag, m.op >= opDateBefore && m.op <= opDateExact, m.op >= opSemverEq && m.op <= opSemverRange:
		m.rareOperand = &rareOperand{}
	}
	switch typ {
	case TypePerson:
		m.source = sourcePerson
	case TypeGroup:
		m.source = sourceGroup
	case TypeCohort:
		m.source = sourceCohort
		return m, nil
	case TypeFlag:
		m.source = sourceFlag
		switch v := p.Value.(type) {
		case bool:
			m.expectBool = v
		case string:
			m.expectStr, m.expectIsS = v, true
		default: // null or another value: PostHog's server matches nothing
			m.valid = false
		}
		if p.Key == "" {
			m.valid = false // names no flag: no match, and no missing dependency
		}
		return m, nil
	}
	if p.Value == nil && m.op != opIsSet && m.op != opIsNotSet {
		m.valid = false // an operator that needs a value has none: no match
		return m, nil
	}
	var buf [32]byte
	switch m.op {
	case opExact, opIsNot:
		if booleanLike(p.Value) {
			m.boolMode, m.boolWant = true, truthy(p.Value)
			break
		}
		values, isList := p.Value.([]any)
		if !isList {
			values = []any{p.Value}
		}
		for _, v := range values {
			m.lowers = append(m.lowers, lowerUnicode(stringForm(v, &buf)))
		}
	case opIContains, opNotIContains, opStartsWith, opEndsWith, opNotStartsWith, opNotEndsWith:
		m.lower = lowerASCIIString(stringForm(p.Value, &buf))
	case opRegex, opNotRegex:
		m.re = compileRegex(stringForm(p.Value, &buf))
	case opGT, opGTE, opLT, opLTE:
		m.num, m.numOK = number(p.Value)
		m.valid = m.numOK
	case opDateBefore, opDateAfter, opDateExact:
		s, ok := p.Value.(string)
		m.date = parseDateFilter(s)
		m.valid = ok && m.date.valid
	case opSemverEq, opSemverNeq, opSemverGT, opSemverGTE, opSemverLT, opSemverLTE:
		m.version, m.valid = parseSemver(stringForm(p.Value, &buf))
		m.version.pre, m.version.build = strings.Clone(m.version.pre), strings.Clone(m.version.build)
	case opSemverRange:
		m.vrange, m.valid = requirement(opName, stringForm(p.Value, &buf))
		for i := range m.vrange {
			m.vrange[i].pre = strings.Clone(m.vrange[i].pre)
		}
	}
	return m, nil
}

// matchValue applies the operator to a present property value, which may be nil: a property
// set to null (before negation).
func (m *matcher) matchValue(v any, e *evaluation) bool {
	switch m.op {
	case opIsSet:
		return true
	case opIsNotSet:
		return false
	}
	if !m.valid {
		return false
	}
	var buf [32]byte
	switch m.op {
	case opExact, opIsNot:
		return m.exact(v, &buf) == (m.op == opExact)
	case opDateBefore, opDateAfter, opDateExact:
		return m.matchDate(v, e)
	case opGT, opGTE, opLT, opLTE:
		return m.compareOrdered(v)
	}
	s := stringForm(v, &buf)
	switch m.op {
	case opIContains:
		return containsFold(s, m.lower)
	case opNotIContains:
		return !containsFold(s, m.lower)
	case opStartsWith:
		return hasPrefixFold(s, m.lower)
	case opNotStartsWith:
		return !hasPrefixFold(s, m.lower)
	case opEndsWith:
		return hasSuffixFold(s, m.lower)
	case opNotEndsWith:
		return !hasSuffixFold(s, m.lower)
	}
	// The regexp packages and the version cache may keep the text: not s, which may be buf.
	t := text(v)
	switch m.op {
	case opRegex:
		return m.re != nil && m.re.match(t)
	case opNotRegex:
		return m.re != nil && m.re.valid(t) && !m.re.match(t)
	case opSemverEq, opSemverNeq, opSemverGT, opSemverGTE, opSemverLT, opSemverLTE:
		pv, ok := e.parsed.version(t)
		if !ok {
			return false
		}
		c := pv.compare(m.version)
		switch m.op {
		case opSemverEq:
			return c == 0
		case opSemverNeq:
			return c != 0
		case opSemverGT:
			return c > 0
		case opSemverGTE:
			return c >= 0
		case opSemverLT:
			return c < 0
		}
		return c <= 0
	case opSemverRange:
		pv, ok := e.parsed.version(t)
		return ok && m.vrange.matches(pv)
	}
	return false
}

// exact reports whether v equals the operand (or one of the operands): compared as truth
// values when the operand is boolean, else as lower-cased string forms.
func (m *matcher) exact(v any, buf *[32]byte) bool {
	if m.boolMode {
		return truthy(v) == m.boolWant
	}
	s := stringForm(v, buf)
	for _, want := range m.lowers {
		if equalLower(s, want) {
			return true
		}
	}
	return false
}

// compareOrdered compares numerically; a value that is not a number matches nothing.
func (m *matcher) compareOrdered(v any) bool {
	pn, ok := number(v)
	if !ok {
		return false
	}
	switch m.op {
	case opGT:
		return pn > m.num
	case opGTE:
		return pn >= m.num
	case opLT:
		return pn < m.num
	}
	return pn <= m.num
}

func (m *matcher) matchDate(v any, e *evaluation) bool {
	pt, ok := e.parsed.date(v)
	var prel dateFilter // the person's value when it is a relative date
	if !ok {
		s, isString := v.(string)
		rel, isRelative := parseRelativeDate(s)
		if !isString || !isRelative {
			return false
		}
		pt, prel = rel.resolve(e.clock()), rel
	}
	ft := m.date.resolve(e.clock())
	if e.req.Until != nil {
		e.dateBound(m.date, prel, pt, ft)
	}
	switch m.op {
	case opDateBefore:
		return pt.Before(ft)
	case opDateAfter:
		return pt.After(ft)
	}
	return pt.Equal(ft)
}

// cohort is a compiled cohort: static membership, or a property group.
type cohort struct {
	id      int64
	static  bool
	unknown bool // not defined, or part of a cycle: matches nobody
	group   *propertyGroup
}

type propertyGroup struct {
	and   bool
	items []groupItem
}

type groupItem struct {
	group   *propertyGroup
	matcher matcherRef
}

package flags

import (
	"regexp"
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
	bools  []bool         // exact/is_not in boolMode: the operand(s) as booleans
	str    string         // the operand's string form
	lower  string         // lower case of str
	num    float64        // gt…lte: the operand as a number
	re     *regexp.Regexp // nil for an invalid pattern: never matches
	cohort *cohort

	// *rareOperand holds the operands of date, semver and flag filters; nil for the others,
	// which are most filters: it keeps a matcher small, and a snapshot holds many.
	*rareOperand

	groupIndex int
	source     source
	op         opcode
	negation   bool
	boolMode   bool // exact/is_not compare as booleans
	numOK      bool
}

// rareOperand is the part of a matcher that only some operators use.
type rareOperand struct {
	date       dateFilter
	version    semver
	vrange     semverRange
	flagIndex  int // -1: an unknown flag or a cycle: never matches
	expectBool bool
	expectStr  string
	expectIsS  bool
}

// newMatcher compiles a filter. ValidateOperator has the same rules; both reject the same
// definitions.
func newMatcher(p Property) (*matcher, error) {
	typ := p.Type
	if typ == "" {
		typ = TypePerson
	}
	if err := ValidateOperator(typ, p.Operator, p.Value); err != nil {
		return nil, err
	}
	opName := defaultOperator(typ, p.Operator)
	m := &matcher{op: opcodes[opName], negation: p.Negation, key: p.Key}
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
		}
		return m, nil
	}
	var buf [32]byte
	switch m.op {
	case opExact, opIsNot:
		values, isList := p.Value.([]any)
		if !isList {
			values = []any{p.Value}
		}
		m.boolMode = len(values) > 0
		for _, v := range values {
			b, ok := boolean(v)
			m.boolMode = m.boolMode && ok
			m.bools = append(m.bools, b)
			s, _ := stringForm(v, &buf)
			m.lowers = append(m.lowers, strings.ToLower(s))
		}
	case opIContains, opNotIContains, opStartsWith, opEndsWith, opNotStartsWith, opNotEndsWith:
		m.str = p.Value.(string)
		m.lower = strings.ToLower(m.str)
	case opRegex, opNotRegex:
		m.re = compileRegex(p.Value.(string))
	case opGT, opGTE, opLT, opLTE:
		s, _ := stringForm(p.Value, &buf)
		m.str = strings.Clone(s)
		m.num, m.numOK = number(p.Value)
	case opDateBefore, opDateAfter, opDateExact:
		m.date, _ = parseDateFilter(p.Value.(string))
	case opSemverEq, opSemverNeq, opSemverGT, opSemverGTE, opSemverLT, opSemverLTE:
		m.version, _ = parseSemver(p.Value.(string))
	case opSemverRange:
		s := p.Value.(string)
		switch opName {
		case OpSemverTilde:
			m.vrange, _ = tildeRange(s)
		case OpSemverCaret:
			m.vrange, _ = caretRange(s)
		default:
			m.vrange, _ = wildcardRange(s)
		}
	}
	return m, nil
}

// matchValue applies the operator to a present property value (before negation).
func (m *matcher) matchValue(v any, e *evaluation) bool {
	switch m.op {
	case opExact, opIsNot:
		var buf [32]byte
		return m.exact(v, &buf) == (m.op == opExact)
	case opIsSet:
		return true
	case opIsNotSet:
		return false
	case opDateBefore, opDateAfter, opDateExact:
		return m.matchDate(v, e)
	case opGT, opGTE, opLT, opLTE:
		return m.compareOrdered(v)
	}
	s, ok := text(v)
	if !ok {
		return m.op.whenMissing()
	}
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
	case opRegex:
		return m.re != nil && m.re.MatchString(s)
	case opNotRegex:
		return m.re != nil && !m.re.MatchString(s)
	case opSemverEq, opSemverNeq, opSemverGT, opSemverGTE, opSemverLT, opSemverLTE:
		pv, ok := e.parsed.version(s)
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
		pv, ok := e.parsed.version(s)
		return ok && m.vrange.contains(pv)
	}
	return false
}

// text is v's string form: strings as they are, other scalars formatted (rare, so the
// allocation is acceptable; the regexp package may keep what it is given).
func text(v any) (string, bool) {
	if s, ok := v.(string); ok {
		return s, true
	}
	return scalarString(v)
}

// exact reports whether v equals the operand (or one of the operands): as booleans when the
// operand is boolean, else on case-insensitive string forms.
func (m *matcher) exact(v any, buf *[32]byte) bool {
	if m.boolMode {
		b, ok := boolean(v)
		if !ok {
			return false
		}
		for _, want := range m.bools {
			if b == want {
				return true
			}
		}
		return false
	}
	if list, ok := v.([]any); ok { // a list-valued property matches when any element does
		for _, e := range list {
			if _, isList := e.([]any); !isList && m.exact(e, buf) {
				return true
			}
		}
		return false
	}
	s, ok := stringForm(v, buf)
	if !ok {
		return false
	}
	for _, want := range m.lowers {
		if strings.EqualFold(s, want) {
			return true
		}
	}
	return false
}

// compareOrdered compares numerically when both sides are numbers, else as strings.
func (m *matcher) compareOrdered(v any) bool {
	var c int
	if pn, ok := number(v); ok && m.numOK {
		switch {
		case pn < m.num:
			c = -1
		case pn > m.num:
			c = 1
		}
	} else {
		s, ok := text(v)
		if !ok {
			return false
		}
		c = strings.Compare(s, m.str)
	}
	switch m.op {
	case opGT:
		return c > 0
	case opGTE:
		return c >= 0
	case opLT:
		return c < 0
	}
	return c <= 0
}

func (m *matcher) matchDate(v any, e *evaluation) bool {
	pt, ok := e.parsed.date(v)
	if !ok {
		return false
	}
	ft := m.date.resolve(e.clock())
	switch m.op {
	case opDateBefore:
		return pt.Before(ft)
	case opDateAfter:
		return pt.After(ft)
	}
	if m.date.dateOnly {
		py, pm, pd := pt.UTC().Date()
		fy, fm, fd := ft.Date()
		return py == fy && pm == fm && pd == fd
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

package persons

import (
	"context"
	"testing"

	"github.com/flagedge/flagedge/shared/flags"
)

// PersonRevision tells, without a look-up, the revision Person answers with; every change of
// what Person would answer — a look-up cached, an overlay written, overrides recorded, a
// forgotten entry fetched again — is a new revision, and nothing else is.
func TestPersonRevisionFollowsWhatPersonAnswers(t *testing.T) {
	s, cp := newStore(t, testConfig)
	ctx := context.Background()
	if _, _, ok := s.PersonRevision(1, 1, false, "known"); ok {
		t.Fatal("a revision told before the person was looked up")
	}
	answered := func() Revision {
		t.Helper()
		p, err := s.Person(ctx, 1, 1, false, "known")
		if err != nil {
			t.Fatal(err)
		}
		s.settle()
		rev, _, ok := s.PersonRevision(1, 1, false, "known")
		if !ok || rev != p.Revision {
			t.Fatalf("PersonRevision %v %v, Person answered %v", rev, ok, p.Revision)
		}
		return p.Revision
	}
	seen := map[Revision]string{}
	step := func(name string, rev Revision, changed bool) {
		t.Helper()
		if prev, ok := seen[rev]; ok && changed {
			t.Errorf("%s: revision %v, as after %s", name, rev, prev)
		}
		if _, ok := seen[rev]; !ok && !changed {
			t.Errorf("%s: a new revision %v for an unchanged person", name, rev)
		}
		seen[rev] = name
	}
	first := answered()
	if first.Stored == 0 {
		t.Fatal("a looked-up person with revision 0")
	}
	step("look-up", first, true)
	step("cached", answered(), false)
	s.ApplyPersonUpdate(1, "known", flags.Properties{"plan": "free"}, nil, nil)
	step("overlay", answered(), true)
	s.ApplyPersonUpdate(1, "known", flags.Properties{"plan": "pro"}, nil, nil)
	step("second overlay", answered(), true)
	if _, err := s.SetHashKeyOverrides(ctx, 1, "known", "anon", []string{"f"}); err != nil {
		t.Fatal(err)
	}
	s.settle()
	rev, overrides, _ := s.PersonRevision(1, 1, false, "known")
	if overrides["f"] != "anon" {
		t.Errorf("overrides %v after recording them", overrides)
	}
	step("overrides", rev, true)
	s.forgetPerson(1, "known")
	s.settle()
	if _, _, ok := s.PersonRevision(1, 1, false, "known"); ok {
		t.Error("a revision told for a forgotten person")
	}
	step("fetched again", answered(), true)
	if n := cp.personCalls.Load(); n != 2 {
		t.Errorf("%d look-ups, want 2", n)
	}
}

// A person the control plane stores nothing about has revision zero, and its overlay's.
func TestUnstoredPersonRevision(t *testing.T) {
	s, _ := newStore(t, testConfig)
	giveFilter(t, s, false, "known") // the control plane stores "known" only
	rev, _, ok := s.PersonRevision(1, 1, false, "nobody")
	if !ok || rev != (Revision{}) {
		t.Fatalf("unstored person: %v %v", rev, ok)
	}
	s.ApplyPersonUpdate(1, "nobody", flags.Properties{"plan": "free"}, nil, nil)
	p, err := s.Person(context.Background(), 1, 1, false, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	rev, _, _ = s.PersonRevision(1, 1, false, "nobody")
	if rev.Stored != 0 || rev.Overlay == 0 || rev != p.Revision {
		t.Errorf("with an overlay: PersonRevision %v, Person %v", rev, p.Revision)
	}
}

package manifest

import (
	"slices"
	"strings"
	"testing"
)

// The classes are the labels' values, not the strata a derived field cuts
// them into; without derived fields they are the strata, numbered alike.
func TestClassesApartFromStrata(t *testing.T) {
	h := Header{LabelFields: []string{"label", "time", "site"}, Derived: []Derived{{Field: "time", Width: 86400}}}
	for _, l := range [][]string{{"b", "2026-01-01", "x"}, {"a", "2026-01-01", "x"}, {"b", "2026-01-02", "x"}, {"a", "2026-01-02", "y"}, {"a", "2026-01-03", "x"}} {
		h.Strata = append(h.Strata, Stratum{Name: strings.Join(l, "+"), Labels: l})
	}
	names, of := h.Classes()
	if !slices.Equal(names, []string{"b+x", "a+x", "a+y"}) || !slices.Equal(of, []int{0, 1, 0, 2, 1}) {
		t.Fatalf("classes %q, of strata %v", names, of)
	}
	for s := range h.Strata {
		if got := h.ClassOf(s); got != of[s] {
			t.Fatalf("ClassOf(%d) = %d, Classes says %d", s, got, of[s])
		}
	}
	if got := h.ClassFields(); !slices.Equal(got, []string{"label", "site"}) {
		t.Fatalf("class fields %q", got)
	}

	plain := Header{LabelFields: []string{"label"}, Strata: []Stratum{{Name: "dog", Labels: []string{"dog"}}, {Name: "cat", Labels: []string{"cat"}}}}
	names, of = plain.Classes()
	if !slices.Equal(names, []string{"dog", "cat"}) || !slices.Equal(of, []int{0, 1}) || plain.ClassOf(1) != 1 {
		t.Fatalf("without derived fields: classes %q, of strata %v", names, of)
	}

	noLabel := Header{LabelFields: []string{"time"}, Derived: []Derived{{Field: "time", Width: 86400}}}
	if err := noLabel.validateFields(); err == nil || !strings.Contains(err.Error(), "no label") {
		t.Fatalf("a dataset whose label fields are all derived: %v", err)
	}
}

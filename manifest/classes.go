package manifest

import (
	"slices"
	"strings"
)

// The label and the strata are two things. A label is what the model
// learns; a stratum is what a batch balances. A stratum is a tuple over
// LabelFields; the label is the part of that tuple read as listed, without
// the fields derived at ingest (time buckets, value bins), which only make
// strata. So a dataset stratified by label x month x length range has as
// many classes as labels, not one per stratum.
//
// A class is numbered by the first stratum that holds it, so a dataset
// without derived fields has exactly one class per stratum, numbered alike:
// its .cls members read as they always did.

// ClassFields are the label fields that make the label: those neither
// derived nor strata-only.
func (h *Header) ClassFields() []string {
	var out []string
	for _, f := range h.LabelFields {
		if !h.derived(f) && !slices.Contains(h.StrataOnly, f) {
			out = append(out, f)
		}
	}
	return out
}

func (h *Header) derived(field string) bool {
	return slices.ContainsFunc(h.Derived, func(d Derived) bool { return d.Field == field })
}

// Classes returns the dataset's class names, by class index, and the class
// of each stratum. A class's name is its labels joined with "+", as a
// stratum's is; with no derived or strata-only fields, classes and strata
// coincide. A dataset of records may have no label: then there are no
// classes, and each stratum's class is -1.
func (h *Header) Classes() (names []string, ofStratum []int) {
	ofStratum = make([]int, len(h.Strata))
	if !h.Labelled() {
		for s := range ofStratum {
			ofStratum[s] = -1
		}
		return nil, ofStratum
	}
	if len(h.Derived) == 0 && len(h.StrataOnly) == 0 {
		for s, st := range h.Strata {
			names = append(names, st.Name)
			ofStratum[s] = s
		}
		return names, ofStratum
	}
	index := map[string]int{}
	for s := range h.Strata {
		name := h.classKey(s)
		c, ok := index[name]
		if !ok {
			c = len(names)
			index[name] = c
			names = append(names, name)
		}
		ofStratum[s] = c
	}
	return names, ofStratum
}

// ClassOf is the class of stratum s (Classes' ofStratum[s]); it walks the
// strata before s when the dataset has derived fields, so callers that ask
// for many strata should keep the answers.
func (h *Header) ClassOf(s int) int {
	if len(h.Derived) == 0 && len(h.StrataOnly) == 0 {
		return s
	}
	if !h.Labelled() {
		return -1
	}
	key := h.classKey(s)
	seen := map[string]bool{}
	for t := range s {
		if k := h.classKey(t); !seen[k] {
			if k == key {
				return len(seen)
			}
			seen[k] = true
		}
	}
	return len(seen)
}

// classKey is the class name of stratum s.
func (h *Header) classKey(s int) string {
	var parts []string
	for i, f := range h.LabelFields {
		if !h.derived(f) && !slices.Contains(h.StrataOnly, f) && i < len(h.Strata[s].Labels) {
			parts = append(parts, h.Strata[s].Labels[i])
		}
	}
	return strings.Join(parts, "+")
}

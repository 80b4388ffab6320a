package layout

import "sort"

// Schedule is the order of a whole run, parsed once: the parameters every
// rank-epoch shares, an alpha that may change by epoch, and the point a
// resumed job starts from. Params gives one rank-epoch's parameters; the
// mount asks it for every directory it opens, so nothing is parsed again.
type Schedule struct {
	Base Params // Epoch and Rank are set by Params; Alpha when AlphaPoints is empty
	// AlphaPoints, ascending by epoch, make alpha linear between them and
	// constant before the first and after the last.
	AlphaPoints []AlphaPoint
	// ResumeEpoch is the epoch a resumed job starts in (-1: none), of which
	// ResumeSkip global batches were consumed.
	ResumeEpoch, ResumeSkip int
	// Recency, when set, weights time strata by age and picks each epoch's
	// time window (recency.go).
	Recency *Recency
}

// AlphaPoint is alpha at one epoch of a schedule.
type AlphaPoint struct {
	Epoch int
	Alpha float64
}

// AlphaAt is the schedule's alpha at epoch e.
func (s *Schedule) AlphaAt(e int) float64 {
	pts := s.AlphaPoints
	switch {
	case len(pts) == 0:
		return s.Base.Alpha
	case e <= pts[0].Epoch:
		return pts[0].Alpha
	case e >= pts[len(pts)-1].Epoch:
		return pts[len(pts)-1].Alpha
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].Epoch > e })
	a, b := pts[i-1], pts[i]
	return a.Alpha + (b.Alpha-a.Alpha)*float64(e-a.Epoch)/float64(b.Epoch-a.Epoch)
}

// Params is the order of rank's epoch e.
func (s *Schedule) Params(e, rank int) (Params, error) {
	p := s.Base
	p.Epoch, p.Rank = e, rank
	p.Alpha = s.AlphaAt(e)
	if e == s.ResumeEpoch {
		p.Skip = s.ResumeSkip
	}
	if s.Recency != nil {
		var err error
		if p.Weights, _, _, err = s.Recency.Weights(e); err != nil {
			return p, err
		}
	}
	return p, p.Validate()
}

package repository

import "testing"

// The started mark of a part's segment belongs to the part's ingest, so
// a commit that drops its job's objects drops it too; an id that only
// looks alike stays its own.
func TestSegmentMarksBelongToTheirJob(t *testing.T) {
	for id, job := range map[string]string{
		SliceSegmentID("job-a831258ce546cd63", 2): "job-a831258ce546cd63",
		SliceSegmentID("job-7", 0):                "job-7",
		"job-a831258ce546cd63":                    "job-a831258ce546cd63",
		"job-7-p00002":                            "job-7-p00002",
		"job-7-p0000022":                          "job-7-p0000022",
		"job-7-p00002x":                           "job-7-p00002x",
		"-p000001":                                "",
		"p000001":                                 "p000001",
	} {
		if got := PartJob(id); got != job {
			t.Errorf("PartJob(%q) = %q, want %q", id, got, job)
		}
	}
}

package layout

import (
	"fmt"
	"strconv"
	"strings"
)

// The names of the tree's numbered entries, epochs/EEEE/rank-RRR/
// batch-BBBBBB.tar, in one place: the tree lists them with these and
// looks them up with the Parse functions, which accept only the exact
// spelling the listing uses (at least the width's digits, no sign).
const (
	epochDigits, rankDigits, batchDigits = 4, 3, 6
	rankPrefix, batchPrefix, batchSuffix = "rank-", "batch-", ".tar"
)

// EpochName is epoch e's directory name.
func EpochName(e int) string { return fmt.Sprintf("%0*d", epochDigits, e) }

// RankName is rank r's directory name.
func RankName(r int) string { return fmt.Sprintf("%s%0*d", rankPrefix, rankDigits, r) }

// BatchName is batch b's file name.
func BatchName(b int) string {
	return fmt.Sprintf("%s%0*d%s", batchPrefix, batchDigits, b, batchSuffix)
}

// ParseEpochName is the epoch an EpochName names.
func ParseEpochName(name string) (int, bool) { return parseNumbered(name, "", epochDigits, "") }

// ParseRankName is the rank a RankName names.
func ParseRankName(name string) (int, bool) { return parseNumbered(name, rankPrefix, rankDigits, "") }

// ParseBatchName is the batch a BatchName names.
func ParseBatchName(name string) (int, bool) {
	return parseNumbered(name, batchPrefix, batchDigits, batchSuffix)
}

// parseNumbered parses name as prefix + a number formatted with at least
// width digits + suffix, accepting only the exact spelling the listing uses.
func parseNumbered(name, prefix string, width int, suffix string) (int, bool) {
	digits, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	if digits, ok = strings.CutSuffix(digits, suffix); !ok {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || fmt.Sprintf("%0*d", width, n) != digits {
		return 0, false
	}
	return n, true
}

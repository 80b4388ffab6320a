package backend

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Causes words per-store errors for people: the stores that failed for one
// cause a user fixes once (refused credentials, a missing bucket) become
// one line naming them all, "all 6 stores refused our credentials
// (SignatureDoesNotMatch): check ..."; every other error keeps a line of
// its own, prefixed with what names its store. names[i] names store i
// ("store 3 (http://...)"); errs[i] nil means store i is fine.
func Causes(names []string, errs []error) []string {
	type group struct {
		stores []int
		codes  []string
	}
	var lines []string
	groups := map[string]*group{}
	var order []string
	failed := 0
	for i, err := range errs {
		if err == nil {
			continue
		}
		failed++
		var key string
		switch {
		case errors.Is(err, ErrAccessDenied):
			key = "credentials"
		case errors.Is(err, ErrNoBucket):
			key = "bucket"
		default:
			lines = append(lines, fmt.Sprintf("%s: %v", names[i], err))
			continue
		}
		g := groups[key]
		if g == nil {
			g = &group{}
			groups[key] = g
			order = append(order, key)
		}
		g.stores = append(g.stores, i)
		if c := s3Code.FindStringSubmatch(err.Error()); c != nil && !slices.Contains(g.codes, c[1]) {
			g.codes = append(g.codes, c[1])
		}
	}
	var out []string
	for _, key := range order {
		g := groups[key]
		var ns []string
		for _, i := range g.stores {
			ns = append(ns, names[i])
		}
		who := strings.Join(ns, ", ")
		if len(g.stores) == len(errs) && len(errs) > 1 {
			who = fmt.Sprintf("all %d stores (%s)", len(errs), who)
		}
		codes := ""
		if len(g.codes) > 0 {
			codes = ": " + strings.Join(g.codes, ", ")
		}
		switch key {
		case "credentials":
			out = append(out, fmt.Sprintf("%s refused our credentials (access denied%s): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the config file's credentials for their hosts", who, codes))
		case "bucket":
			out = append(out, fmt.Sprintf("%s have no such bucket (%s): check the bucket names in the store URLs", who, strings.TrimPrefix(codes, ": ")))
		}
	}
	return append(out, lines...)
}

// s3Code finds the S3 error code the S3 store puts in parentheses.
var s3Code = regexp.MustCompile(`\(([A-Z][A-Za-z]+)\)`)

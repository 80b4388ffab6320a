package backend

import (
	"fmt"
	"strings"
	"testing"
)

// Issue 40 item 17: a wrong secret gave one line of about 3 KB, six stores
// times two messages. One cause the user fixes once is one line.
func TestCausesCollapsesOneCause(t *testing.T) {
	denied := func(i int) error {
		return &Error{Store: fmt.Sprintf("http://h:%d/b", i), Op: "stat", Err: fmt.Errorf("%w (SignatureDoesNotMatch): check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the credentials in the config file", ErrAccessDenied)}
	}
	names := []string{"store 0", "store 1", "store 2", "store 3", "store 4", "store 5"}
	var errs []error
	for i := range 6 {
		errs = append(errs, denied(i))
	}
	got := Causes(names, errs)
	if len(got) != 1 || !strings.HasPrefix(got[0], "all 6 stores (store 0, store 1, store 2, store 3, store 4, store 5) refused our credentials (access denied: SignatureDoesNotMatch): check AWS_ACCESS_KEY_ID") || len(got[0]) > 300 {
		t.Fatalf("six stores refusing the credentials: %q", got)
	}
	errs[2], errs[4] = nil, &Error{Store: "s4", Op: "stat", Err: ErrUnavailable}
	got = Causes(names, errs)
	if len(got) != 2 || !strings.HasPrefix(got[0], "store 0, store 1, store 3, store 5 refused our credentials") || !strings.HasPrefix(got[1], "store 4: ") {
		t.Fatalf("four refusing, one down, one fine: %q", got)
	}
}

package integration

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/repository"
)

// TestList: list names every dataset on the stores with its ingest, size
// and code, and on how many stores its manifest is, in every metadata
// format; a prefix that holds no manifest is not a dataset.
func TestList(t *testing.T) {
	c := sharedCluster(t, 3)
	src := ingestSynthetic(t, c.urls, 50, "alpha", 2, 1)
	ingestSynthetic(t, c.urls, 80, "beta", 2, 1)
	// alpha's listing again in metadata formats 2 and 3: the same row.
	for _, f := range []string{"2", "3"} {
		if r := run(t, 5*time.Minute, nil, "ingest", "--stores="+strings.Join(c.urls, ","), "--data=2", "--parity=1", "--shard-size=4MiB", "--format="+f, src, "alpha"+f); r.code != 0 {
			t.Fatalf("ingest in format %s: %v", f, r)
		}
	}
	ctx := context.Background()
	if err := c.store(t, 0).Put(ctx, "junk/x", []byte("not a dataset")); err != nil {
		t.Fatal(err)
	}
	if err := c.store(t, 2).Delete(ctx, repository.ManifestKey("beta")); err != nil {
		t.Fatal(err)
	}
	r := run(t, time.Minute, nil, "list", "--stores="+strings.Join(c.urls, ","))
	if r.code != 0 {
		t.Fatalf("list: %v", r)
	}
	for _, re := range []string{
		`(?m)^alpha +\d{8}T\d{6}Z-[0-9a-f]+ +50 +\S+ \S+ +\d+ +RS\(2,1\) +3 of 3 stores +- \(no healer\)$`,
		`(?m)^beta +\d{8}T\d{6}Z-[0-9a-f]+ +80 +\S+ \S+ +\d+ +RS\(2,1\) +2 of 3 stores +- \(no healer\)$`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("list output does not match %s:\n%v", re, r)
		}
	}
	if strings.Contains(r.stdout, "junk") || strings.Count(strings.TrimSpace(r.stdout), "\n") != 4 {
		t.Fatalf("list: want a header and exactly four datasets:\n%v", r)
	}
	// Samples, bytes and shards, whatever the format.
	row := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + ` +\S+ +(\d+ +\S+ \S+ +\d+) +RS`).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("no row for %s:\n%v", name, r)
		}
		return m[1]
	}
	for _, name := range []string{"alpha2", "alpha3"} {
		if got, want := row(name), row("alpha"); got != want {
			t.Fatalf("%s lists %q, alpha (format 1) %q", name, got, want)
		}
	}
	// Once a healer has run on alpha, list shows its margin (RS(2,1),
	// intact: 1 of 1) and when the healer checked it, and beta's still
	// none. How long ago is not asserted: "now" turned "1 second ago"
	// between the heal and the list on a busy CI machine.
	if r := run(t, time.Minute, nil, "heal", "--once", "--stores="+strings.Join(c.urls, ","), "alpha"); r.code != 0 {
		t.Fatalf("heal --once alpha: %v", r)
	}
	r = run(t, time.Minute, nil, "list", "--stores="+strings.Join(c.urls, ","))
	for _, re := range []string{
		`(?m)^alpha +.* 3 of 3 stores +1 of 1 \(healer, (now|\d+ seconds? ago)\)$`,
		`(?m)^beta +.* 2 of 3 stores +- \(no healer\)$`,
	} {
		if r.code != 0 || !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("list after a healer ran on alpha does not match %s:\n%v", re, r)
		}
	}
}

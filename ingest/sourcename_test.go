package ingest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A source of records refused as a whole names the file or directory the
// user gave: a JSONL corpus whose records lack the --strata field was
// refused as "source .", the corpus's directory.
func TestRecordSourceRefusalNamesTheSource(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "docs.jsonl")
	os.WriteFile(corpus, []byte(`{"text": "a", "src": "x"}`+"\n"), 0o644)
	shard := filepath.Join(dir, "shards", "s.tar")
	os.MkdirAll(filepath.Dir(shard), 0o755)
	os.WriteFile(shard, goTar(t, 0, [2]string{"k.bin", "x"}, [2]string{"k.json", `{"src": "a"}`}), 0o644)
	for _, c := range []struct {
		src  string
		opts ScanOptions
		want string
	}{
		{corpus, ScanOptions{Strata: []string{"nosuch"}, Members: []MemberField{{"text", "txt"}}}, "corpus " + corpus + ": no record's .json member has the field \"nosuch\""},
		{filepath.Dir(shard), ScanOptions{Strata: []string{"nosuch"}}, "source " + filepath.Dir(shard) + ": no record's .json member has the field \"nosuch\""},
	} {
		_, err := ScanWith(c.src, c.opts)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error that starts %q", c.src, err, c.want)
		}
	}
}

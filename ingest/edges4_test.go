package ingest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 55, smaller items:
//   - a .json member with data after its object ({..}{..}, {..} ], {..}
//     null) was accepted, and the loader's json.loads then raised
//     JSONDecodeError; so was a .json member of null. Refused, naming the
//     shard and the member, as the same JSONL line is.
//   - a key with control characters (\x01, ESC[31m, a C1 character) put
//     raw escapes into samples/ names and index.csv. Refused, naming it,
//     from a WebDataset shard, a JSONL corpus and a directory tree.
func TestJSONMembersAndKeysAreWhatLoadersRead(t *testing.T) {
	for _, body := range []string{`{"source": "a"}{"source": "b"}`, `{"source": "a"} ]`, `{"source": "a"} null`, `null`, `{"source": "a"} x`} {
		p := filepath.Join(t.TempDir(), "s.tar")
		os.WriteFile(p, goTar(t, 0, [2]string{"000001.bin", "x"}, [2]string{"000001.json", body}), 0o644)
		_, err := scanWebDataset([]string{p}, ScanOptions{Strata: []string{"source"}})
		if err == nil || !strings.Contains(err.Error(), `member "000001.json" is not a JSON object`) || !strings.Contains(err.Error(), p) {
			t.Errorf(".json member %q: %v; want it refused, naming the shard and the member", body, err)
		}
	}
	for _, body := range []string{`{"source": "a"}`, "{\"source\": \"a\"}\n", ` {"source": "a"} `} {
		p := filepath.Join(t.TempDir(), "s.tar")
		os.WriteFile(p, goTar(t, 0, [2]string{"000001.bin", "x"}, [2]string{"000001.json", body}), 0o644)
		if _, err := scanWebDataset([]string{p}, ScanOptions{Strata: []string{"source"}}); err != nil {
			t.Errorf(".json member %q: %v", body, err)
		}
	}

	for _, key := range []string{"a\x01b", "\x1b[31mred", "c\u0085d", "tab\there"} {
		t.Run("webdataset", func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "s.tar")
			os.WriteFile(p, goTar(t, 0, [2]string{key + ".bin", "x"}, [2]string{key + ".json", `{"source": "a"}`}), 0o644)
			if _, err := ScanWith(p, ScanOptions{Strata: []string{"source"}}); err == nil || !strings.Contains(err.Error(), "control character") {
				t.Errorf("key %q: %v; want it refused", key, err)
			}
		})
		t.Run("jsonl", func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.jsonl")
			k, _ := json.Marshal(key)
			os.WriteFile(p, []byte(`{"id": `+string(k)+`, "text": "t", "source": "a"}`+"\n"), 0o644)
			if _, err := ScanWith(p, ScanOptions{Strata: []string{"source"}, KeyField: "id", Members: []MemberField{{"text", "txt"}}}); err == nil || !strings.Contains(err.Error(), "control character") {
				t.Errorf("key %q: %v; want it refused", key, err)
			}
		})
		t.Run("tree", func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "cat"), 0o755)
			os.WriteFile(filepath.Join(dir, "cat", "ok.bin"), []byte("x"), 0o644)
			if err := os.WriteFile(filepath.Join(dir, "cat", key+".bin"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := ScanWith(dir, ScanOptions{}); err == nil || !strings.Contains(err.Error(), "control character") {
				t.Errorf("key %q: %v; want it refused", key, err)
			}
		})
	}
}

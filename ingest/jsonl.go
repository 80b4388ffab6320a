package ingest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
)

// JSONL sources of records. Each line of a .jsonl file is a record (a
// document): the fields --member names become members, their string
// values the members' bytes (--member text=txt: the text, as UTF-8, is
// the record's .txt), and the other fields go to its .json member, an
// object with sorted keys. The label and the strata are read from those
// other fields. Its key is the field --key names, else its line number.
// A line that is not a JSON object, or whose member field is not a string,
// is refused, naming the file and the line.

// MemberField makes a JSONL field a record member.
type MemberField struct{ Field, Name string }

// ParseMemberField parses --member FIELD=NAME.
func ParseMemberField(v string) (MemberField, error) {
	field, name, ok := strings.Cut(v, "=")
	if !ok || field == "" {
		return MemberField{}, fmt.Errorf("--member %q: use FIELD=NAME, e.g. text=txt (the field's string value becomes the record's .txt)", v)
	}
	if err := layout.CleanMemberName(name, false); err != nil {
		return MemberField{}, fmt.Errorf("--member %q: %v", v, err)
	}
	if name == FieldsMember {
		return MemberField{}, fmt.Errorf("--member %q: %q is the member of the record's other fields", v, FieldsMember)
	}
	return MemberField{field, name}, nil
}

// endOfJSON checks that dec, having decoded one value, holds nothing
// after it but white space: "{..}{..}" and "{..} ]" are refused, as
// Python's json.loads refuses them.
func endOfJSON(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more than one JSON value, or data after the value")
	}
	return nil
}

// jsonlLine is where a record's line lies in its file: ingest reads it
// again to make the record's bytes.
type jsonlLine struct{ off, n int64 }

// jsonlRecord makes a line's record: its key, members' bytes (in order:
// the member fields, then "json" when other fields remain) and fields.
func jsonlRecord(line []byte, o ScanOptions, lineNo int) (key string, names []string, bodies [][]byte, fields map[string]any, err error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		if err == nil {
			err = errors.New("null")
		}
		return "", nil, nil, nil, fmt.Errorf("not a JSON object (%v): each line of a corpus is one record, an object", err)
	}
	if err := endOfJSON(dec); err != nil {
		return "", nil, nil, nil, err
	}
	for _, mf := range o.Members {
		v, ok := obj[mf.Field]
		if !ok {
			return "", nil, nil, nil, fmt.Errorf("no field %q (--member %s=%s)", mf.Field, mf.Field, mf.Name)
		}
		str, ok := v.(string)
		if !ok {
			return "", nil, nil, nil, fmt.Errorf("field %q is a %T, not a string: --member takes text fields", mf.Field, v)
		}
		names, bodies = append(names, mf.Name), append(bodies, []byte(str))
		delete(obj, mf.Field)
	}
	key = fmt.Sprintf("%09d", lineNo)
	if o.KeyField != "" {
		v, ok := obj[o.KeyField]
		if !ok {
			return "", nil, nil, nil, fmt.Errorf("no key field %q (--key)", o.KeyField)
		}
		if key, err = jsonLabel(v); err != nil {
			return "", nil, nil, nil, fmt.Errorf("key field %q %v", o.KeyField, err)
		}
	}
	if names, bodies, err = appendFieldsMember(names, bodies, obj); err != nil {
		return "", nil, nil, nil, err
	}
	if len(names) == 0 {
		return "", nil, nil, nil, errors.New("an empty object: a record needs a member")
	}
	return key, names, bodies, obj, nil
}

// scanJSONLRecords reads a JSONL corpus's records, holding their metadata
// only: each line's place, its members' sizes and its fields.
func scanJSONLRecords(name string, o ScanOptions) (*Source, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("corpus %s: %w", name, err)
	}
	defer f.Close()
	limit := o.MaxRecordSize
	if limit <= 0 || limit > manifest.MaxShardSize {
		limit = manifest.MaxShardSize
	}
	seen := map[string]int{}
	batch := recordBatch{file: name}
	// A line holds one record, its members JSON strings: it may take
	// twice the record bound (escapes), and 64 KiB for its fields, and
	// is refused as it is read past that, never held whole.
	maxLine := 2*limit + 64<<10
	br := bufio.NewReaderSize(newLineBound(skipBOM(f), maxLine), 1<<20)
	var off int64
	if n, ok := bomLen(name); ok {
		off = n
	}
	for lineNo := 1; ; lineNo++ {
		b, err := br.ReadBytes('\n')
		if len(b) == 0 && err == io.EOF {
			break
		}
		if long := (*LineTooLongError)(nil); errors.As(err, &long) {
			return nil, fmt.Errorf("corpus %s line %d: longer than %d bytes, so its record cannot fit --max-record-size %d (a line may take twice the record's bytes, for escapes, and 64KiB for its fields); it was refused before it was read whole: raise --max-record-size, or split the record", name, long.Line, maxLine, limit)
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("corpus %s line %d: %w", name, lineNo, err)
		}
		at := off
		off += int64(len(b))
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		key, names, bodies, fields, err := jsonlRecord(b, o, lineNo)
		if err != nil {
			return nil, fmt.Errorf("corpus %s line %d: %v", name, lineNo, err)
		}
		if err := manifest.CheckKey(key); err != nil {
			return nil, fmt.Errorf("corpus %s line %d: key %q: %v", name, lineNo, key, err)
		}
		if prev, dup := seen[key]; dup {
			return nil, fmt.Errorf("corpus %s line %d: key %q again, after line %d: two records with one key; give every record its own --key", name, lineNo, key, prev)
		}
		seen[key] = lineNo
		r := wdsRecord{key: key, off: at, line: lineNo, lineLen: int64(len(b))}
		if err := batch.setFields(&r, fields, name); err != nil {
			return nil, err
		}
		if err := batch.addMembers(&r, names, bodies, limit); err != nil {
			return nil, fmt.Errorf("corpus %s line %d: %v", name, lineNo, err)
		}
		batch.records = append(batch.records, r)
	}
	if len(batch.records) == 0 {
		return nil, fmt.Errorf("corpus %s: %w: no line holds a record", name, ErrEmpty)
	}
	batch.doneReading()
	return recordSource(&Source{Root: filepath.Dir(name)}, o, []recordBatch{batch})
}

// bomLen is the length of the UTF-8 byte order mark name starts with.
func bomLen(name string) (int64, bool) {
	f, err := os.Open(name)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var b [3]byte
	if n, _ := io.ReadFull(f, b[:]); n == 3 && b == [3]byte{0xEF, 0xBB, 0xBF} {
		return 3, true
	}
	return 0, false
}

// readJSONLRecord makes a JSONL record's bytes again, from its line, into p.
func readJSONLRecord(it *Item, memberNames []string, p []byte, o ScanOptions, open func(string) (io.ReaderAt, error)) error {
	f, err := open(it.Path)
	if err != nil {
		return err
	}
	line := make([]byte, it.lineLen)
	if _, err := f.ReadAt(line, it.lineAt); err != nil {
		return fmt.Errorf("read record %q: %s line %d: %w (did the corpus change during ingest?)", it.Key, it.Path, it.Line, err)
	}
	_, names, bodies, _, err := jsonlRecord(line, o, it.Line)
	return copyMembers(it, memberNames, names, bodies, err, p)
}

// appendFieldsMember adds a record's other fields as its "json" member, an
// object with sorted keys (so the same bytes at scan and at upload), when
// there are any.
func appendFieldsMember(names []string, bodies [][]byte, fields map[string]any) ([]string, [][]byte, error) {
	if len(fields) == 0 {
		return names, bodies, nil
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, nil, err
	}
	return append(names, FieldsMember), append(bodies, b), nil
}

// copyMembers copies a record's members, made again at upload (err: the
// failure to make them), into p, after checking they are what the scan
// planned.
func copyMembers(it *Item, memberNames []string, names []string, bodies [][]byte, err error, p []byte) error {
	if err != nil || len(bodies) != len(it.Members) {
		return fmt.Errorf("read %s: it changed during ingest (%v)", it.Where(), err)
	}
	for k, body := range bodies {
		if names[k] != memberNames[it.Members[k].Name] || int64(len(body)) != int64(it.Members[k].Size) {
			return fmt.Errorf("read %s: it changed during ingest (member %q)", it.Where(), names[k])
		}
		p = p[copy(p, body):]
	}
	return nil
}

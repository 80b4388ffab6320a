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
	"runtime/debug"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
	"slices"
	"strconv"
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

// decodeFieldsObject decodes a record's .json member, one JSON object, as
// a json.Decoder with UseNumber does. Its values are decoded one by one
// (decodeJSONValue), most from their bytes: a decoder for each record
// was a seventh of an ingest's CPU (100,000 image-text records). A flat
// object is decoded into reuse, emptied first, when reuse is not nil: a
// map for each record was a tenth of the bytes an ingest of 1,000,000
// short WebDataset records allocated.
func decodeFieldsObject(b []byte, reuse map[string]any) (map[string]any, error) {
	if obj, ok := flatObject(b, reuse); ok {
		return obj, nil
	}
	var raw map[string]rawJSON
	if err := json.Unmarshal(b, &raw); err == nil && raw != nil {
		obj := make(map[string]any, len(raw))
		for k, v := range raw {
			if obj[k], err = decodeJSONValue(v); err != nil {
				return nil, err
			}
		}
		return obj, nil
	}
	// Not one object: the decoder says why, as it always has.
	reason, _ := objectRefusal(b)
	return nil, reason
}

// flatObject decodes b when it is one flat JSON object, as most .json
// members are: keys with no escapes; strings, numbers, true, false and
// null; nothing nested (flatFields). It decodes what it takes as the
// decoder does (FuzzDecodeFieldsObjectAsTheDecoder), and declines (false)
// all else, for decodeFieldsObject's general path: json.Unmarshal of a
// record's fields, and its map of raw values, were 11% of the CPU of an
// ingest of 1,000,000 short WebDataset records. It decodes into obj,
// emptied first, unless obj is nil.
func flatObject(b []byte, obj map[string]any) (map[string]any, bool) {
	if obj == nil {
		obj = make(map[string]any, 4)
	}
	clear(obj)
	ok := flatFields(b, func(key string, raw []byte) bool {
		v, err := decodeJSONValue(raw)
		obj[key] = v
		return err == nil
	})
	return obj, ok
}

// flatFields calls field with each key and raw value of b, in order,
// when b is one flat JSON object (see flatObject), as json.Unmarshal
// hands a field's value to a json.Unmarshaler: its bytes, spaces
// around them trimmed. It returns false, having called field for some of
// them perhaps, when b is anything else, or when field does.
func flatFields(b []byte, field func(key string, raw []byte) bool) bool {
	i := 0
	space := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	// str passes the string at i (a quote), escapes valid as JSON's
	// (only when escapes), and says whether it held any.
	str := func(escapes bool) (escaped, ok bool) {
		j := i + 1
		for j < len(b) && b[j] != '"' {
			switch {
			case b[j] < 0x20:
				return false, false
			case b[j] == '\\':
				if !escapes || j+1 == len(b) {
					return false, false
				}
				escaped = true
				switch b[j+1] {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
					j += 2
				case 'u':
					if _, ok := hex4(b, j+2); !ok {
						return false, false
					}
					j += 6
				default:
					return false, false
				}
				continue
			}
			j++
		}
		if j >= len(b) || !utf8.Valid(b[i+1:j]) {
			return false, false
		}
		i = j + 1
		return escaped, true
	}
	digits := func() bool {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > j
	}
	number := func() bool { // JSON's grammar, exactly
		if b[i] == '-' {
			i++
		}
		switch {
		case i < len(b) && b[i] == '0':
			i++
		case i < len(b) && b[i] >= '1' && b[i] <= '9':
			digits()
		default:
			return false
		}
		if i < len(b) && b[i] == '.' {
			i++
			if !digits() {
				return false
			}
		}
		if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
			i++
			if i < len(b) && (b[i] == '+' || b[i] == '-') {
				i++
			}
			if !digits() {
				return false
			}
		}
		return true
	}
	space()
	if i == len(b) || b[i] != '{' {
		return false
	}
	i++
	space()
	if i < len(b) && b[i] == '}' {
		i++
		space()
		return i == len(b)
	}
	for {
		if i == len(b) || b[i] != '"' {
			return false
		}
		at := i
		if escaped, ok := str(false); !ok || escaped {
			return false
		}
		key := string(b[at+1 : i-1])
		space()
		if i == len(b) || b[i] != ':' {
			return false
		}
		i++
		space()
		if i == len(b) {
			return false
		}
		at = i
		switch c := b[i]; {
		case c == '"':
			if _, ok := str(true); !ok {
				return false
			}
		case c == '-' || c >= '0' && c <= '9':
			if !number() {
				return false
			}
		case bytes.HasPrefix(b[i:], []byte("true")), bytes.HasPrefix(b[i:], []byte("null")):
			i += 4
		case bytes.HasPrefix(b[i:], []byte("false")):
			i += 5
		default:
			return false
		}
		if !field(key, b[at:i:i]) {
			return false
		}
		space()
		if i < len(b) && b[i] == ',' {
			i++
			space()
			continue
		}
		if i < len(b) && b[i] == '}' {
			i++
			space()
			return i == len(b)
		}
		return false
	}
}

// jsonlLine is where a record's line lies in its file: ingest reads it
// again to make the record's bytes.
type jsonlLine struct{ off, n int64 }

// rawJSON is one value of a line's object, undecoded: the bytes of the
// line it spans. json.Unmarshal hands an Unmarshaler a slice of its input
// and never writes to its input, and the caller holds the line until the
// record is made, so keeping the slice copies nothing (a copy would cost
// memory, not correctness).
type rawJSON []byte

func (r *rawJSON) UnmarshalJSON(b []byte) error { *r = b; return nil }

// decodeJSONValue decodes one field's value as the fields are decoded:
// numbers as json.Number, so that they keep every digit.
//
// raw is a value of a line json.Unmarshal took whole, so a number, a
// literal, or a string with no escapes is decoded from its bytes as the
// decoder would: a decoder for each field was a third of the decoding of
// a corpus of short documents.
func decodeJSONValue(raw []byte) (any, error) {
	switch {
	case len(raw) == 0:
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		return json.Number(raw), nil
	case string(raw) == "true", string(raw) == "false":
		return raw[0] == 't', nil
	case string(raw) == "null":
		return nil, nil
	case raw[0] == '"' && len(raw) >= 2 && raw[len(raw)-1] == '"' && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw):
		return string(raw[1 : len(raw)-1]), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// jsonString is the text of a JSON string value raw, as json.Unmarshal
// makes it. A string with no escapes whose bytes are valid UTF-8 is its
// bytes between the quotes: a slice of raw, no copy (a 1 GiB text field
// was copied four times, issue 55 item 5). Any other string is unquoted
// by json.Unmarshal, which replaces invalid UTF-8 as it always has. ok is
// false when raw is not a string.
func jsonString(raw []byte) (text []byte, ok bool, err error) {
	if len(raw) < 2 || raw[0] != '"' {
		return nil, false, nil
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner, true, nil
	}
	var str string
	if err := json.Unmarshal(raw, &str); err != nil {
		return nil, true, err
	}
	return []byte(str), true, nil
}

// jsonlRecord makes a line's record: its key, members' bytes (in order:
// the member fields, then "json" when other fields remain) and fields.
// The members' bytes may be slices of line.
//
// The object is split into its fields' raw values first, and only the
// fields that are not members are decoded: a member's text is taken from
// the line itself, so a line's record costs the line and little more, not
// the line and its decoder's copies of it.
func jsonlRecord(line []byte, o ScanOptions, lineNo int) (key string, names []string, bodies [][]byte, fields map[string]any, err error) {
	if err := checkJSONText(line); err != nil {
		return "", nil, nil, nil, err
	}
	raw := make(map[string]rawJSON, 4)
	if !flatFields(line, func(key string, v []byte) bool { raw[key] = v; return true }) {
		// Not flat: json.Unmarshal takes it, or says why not.
		raw = nil
		if err := json.Unmarshal(line, &raw); err != nil || raw == nil {
			return "", nil, nil, nil, notAnObject(line)
		}
	}
	for _, mf := range o.Members {
		v, ok := raw[mf.Field]
		if !ok {
			return "", nil, nil, nil, fmt.Errorf("no field %q (--member %s=%s)", mf.Field, mf.Field, mf.Name)
		}
		text, isString, err := jsonString(v)
		if err != nil {
			return "", nil, nil, nil, fmt.Errorf("field %q: %v", mf.Field, err)
		}
		if !isString {
			other, _ := decodeJSONValue(v)
			return "", nil, nil, nil, fmt.Errorf("field %q is a %T, not a string: --member takes text fields", mf.Field, other)
		}
		names, bodies = append(names, mf.Name), append(bodies, text)
		delete(raw, mf.Field)
	}
	obj := make(map[string]any, len(raw))
	for k, v := range raw {
		if obj[k], err = decodeJSONValue(v); err != nil {
			return "", nil, nil, nil, fmt.Errorf("field %q: %v", k, err)
		}
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

// checkJSONText refuses a line that is not text: bytes that are not UTF-8,
// or a \u escape of half a UTF-16 surrogate pair with no other half.
// encoding/json replaces either with U+FFFD, silently, so the record would
// be committed holding text that is not the source's (issue 59: \xff\xfe
// in a .txt field, and "\ud800", went in with exit 0). Python's json.loads
// keeps a lone surrogate in a str that cannot be encoded as UTF-8 again.
// The error names the byte's offset in the line.
func checkJSONText(line []byte) error {
	if !utf8.Valid(line) {
		for i := 0; i < len(line); {
			r, n := utf8.DecodeRune(line[i:])
			if r == utf8.RuneError && n <= 1 {
				return fmt.Errorf("byte %d (0x%02x) is not UTF-8: a JSON line is text, and its text fields become members and .json as the loaders decode them (UTF-8); re-encode the corpus as UTF-8, or keep bytes that are not text in a binary Parquet column or a WebDataset member, stored as they are", i, line[i])
			}
			i += n
		}
	}
	// A backslash only ever opens an escape in a line that decodes (one
	// outside a string is a syntax error, refused anyway), and each
	// escape is skipped whole, so "\\ud800" is a backslash and text.
	for i := bytes.IndexByte(line, '\\'); i >= 0 && i+1 < len(line); {
		n := 2
		if line[i+1] == 'u' {
			n = 6
			switch cp, ok := hex4(line, i+2); {
			case ok && cp >= 0xD800 && cp < 0xDC00:
				if low, ok := hex4(line, i+8); ok && line[i+6] == '\\' && line[i+7] == 'u' && low >= 0xDC00 && low < 0xE000 {
					n = 12
				} else {
					return fmt.Errorf("byte %d: the escape %s is half of a UTF-16 surrogate pair, with no low half after it: it is no character, and no UTF-8 text can hold it; mend the corpus's encoder", i, line[i:i+6])
				}
			case ok && cp >= 0xDC00 && cp < 0xE000:
				return fmt.Errorf("byte %d: the escape %s is the low half of a UTF-16 surrogate pair, with no high half before it: it is no character, and no UTF-8 text can hold it; mend the corpus's encoder", i, line[i:i+6])
			}
		}
		next := bytes.IndexByte(line[min(i+n, len(line)):], '\\')
		if next < 0 {
			break
		}
		i = min(i+n, len(line)) + next
	}
	return nil
}

// hex4 is the value of the four hex digits at line[at:], if there are four.
func hex4(line []byte, at int) (int, bool) {
	if at < 0 || at+4 > len(line) {
		return 0, false
	}
	v := 0
	for _, c := range line[at : at+4] {
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | int(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		case 'A' <= c && c <= 'F':
			v = v<<4 | int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// notAnObject says why line, which json.Unmarshal refused as an object,
// is not one record: in the words of a decoder of one value, as the
// loaders' json.loads would refuse it (a second value after the first, an
// array, null).
func notAnObject(line []byte) error {
	reason, trailing := objectRefusal(line)
	if trailing {
		return reason
	}
	return fmt.Errorf("not a JSON object (%v): each line of a corpus is one record, an object", reason)
}

// objectRefusal is why a json.Decoder with UseNumber does not take b as
// one JSON object: its error, "null", data after the value (trailing),
// or "not one JSON object" when it takes b and json.Unmarshal did not.
func objectRefusal(b []byte) (reason error, trailing bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var obj map[string]any
	err := dec.Decode(&obj)
	switch {
	case err == nil && obj == nil:
		return errors.New("null"), false
	case err == nil:
		if err = endOfJSON(dec); err != nil {
			return err, true
		}
		return errors.New("not one JSON object"), false
	}
	return err, false
}

// scanJSONLRecords reads a JSONL corpus's records, holding their metadata
// only: each line's place, its members' sizes and its fields.
func scanJSONLRecords(name string, o ScanOptions) (*Source, error) {
	r, err := openJSONL(name, o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	batch := recordBatch{file: name}
	if _, err := r.read(&batch, nil); err != nil {
		return nil, err
	}
	if len(batch.records) == 0 {
		return nil, fmt.Errorf("corpus %s: %w: no line holds a record", name, ErrEmpty)
	}
	batch.doneReading()
	return recordSource(&Source{Root: filepath.Dir(name)}, "corpus "+name, o, []recordBatch{batch})
}

// jsonlReader reads a JSONL corpus's records front to back, a batch at a
// time: the whole corpus for a scan, a chunk of it for a streaming ingest
// (stream.go). A key is checked against the keys of the batch it is in;
// a streaming ingest checks the others at its end.
type jsonlReader struct {
	name   string
	o      ScanOptions
	f      corpusFile
	br     *bufio.Reader
	limit  int64
	off    int64 // of the next line in the file
	lineNo int   // of the last line read
	// sliced: r reads a part's slice of the file (slice), whose lines'
	// numbers it does not know: a line is named by its byte offset.
	sliced bool
	start  int64             // the offset its lines are read from (its slice's first line)
	end    int64             // in a slice, the offset no line it reads starts at or after
	size   int64             // the file's, when opened
	seen   map[string][2]int // a key of this batch -> its line's number and offset
	// lastRecords is the most records a batch has had.
	lastRecords int
	// made, when not nil, takes each record's bytes (its members back to
	// back) as the scan made them, by its line's offset, for records of
	// at most madeRecord bytes (Stream: the upload takes them from there,
	// and does not read and decode the line again).
	made *madeRecords
}

// madeRecord bounds the records whose bytes a streaming ingest keeps from
// the scan to the upload: a larger one is made again from its line, so a
// huge record is not held while its chunk waits (issue 55 item 5).
const madeRecord = 1 << 20

// corpusFile is what a corpus is read through: a file read as one
// version (openCorpus).
type corpusFile interface {
	io.ReaderAt
	io.Closer
	Stat() (os.FileInfo, error)
}

// openCorpus opens a corpus file; tests count what is read through it.
var openCorpus = func(name string) (corpusFile, error) { return openOneVersion(name) }

func openJSONL(name string, o ScanOptions) (*jsonlReader, error) {
	f, err := openCorpus(name)
	if err != nil {
		return nil, fmt.Errorf("corpus %s: %w", name, err)
	}
	limit := o.MaxRecordSize
	if limit <= 0 || limit > manifest.MaxShardSize {
		limit = manifest.MaxShardSize
	}
	// A line holds one record, its members JSON strings: it may take
	// twice the record bound (escapes), and 64 KiB for its fields, and
	// is refused as it is read past that, never held whole.
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("corpus %s: %w", name, err)
	}
	r := &jsonlReader{name: name, o: o, f: f, limit: limit, size: fi.Size()}
	var bom [3]byte
	if n, _ := f.ReadAt(bom[:], 0); n == 3 && string(bom[:]) == "\ufeff" {
		r.off = 3 // a UTF-8 byte order mark, which is no line's
	}
	r.br = bufio.NewReaderSize(newLineBound(io.NewSectionReader(f, r.off, r.size-r.off), maxLineFor(limit)), 1<<20)
	return r, nil
}

// maxLineFor is the longest line a record of at most limit bytes may take.
func maxLineFor(limit int64) int64 { return 2*limit + 64<<10 }

// slice makes r read only the lines that start in [from, to) of its file,
// a part's slice of the corpus (Stream.Slice): every line of the file is
// then read by exactly one of the parts whose slices cover it, however
// the bytes are cut. It reads the byte before from, to tell whether a line
// starts at from (else the line under from is the slice before's, and this
// one starts after its newline), then [from, to), each byte once, and past
// to only the rest of the last line it starts (in pieces of tailPiece). It
// says whether a line starts in the slice; if not, it holds no record.
func (r *jsonlReader) slice(from, to int64) (bool, error) {
	from = max(from, r.off) // a byte order mark is no line's
	sr := &sliceReader{f: r.f, pos: from, end: to, done: from >= to, last: '\n'}
	if !sr.done && from > r.off {
		var b [1]byte
		if _, err := r.f.ReadAt(b[:], from-1); err != nil {
			return false, fmt.Errorf("corpus %s: %w", r.name, err)
		}
		if b[0] != '\n' {
			if err := sr.skipLine(); err != nil {
				return false, fmt.Errorf("corpus %s: %w", r.name, err)
			}
		}
	}
	start := sr.pos - int64(len(sr.pending))
	r.off, r.start, r.end, r.sliced, r.lineNo = start, start, to, true, 0
	r.br = bufio.NewReaderSize(newLineBound(sr, maxLineFor(r.limit)), 1<<20)
	return !sr.done, nil
}

// tailPiece is what a slice reads at a time past its end, for the rest of
// its last line: it reads at most this much more of the next slice's
// bytes than that line's.
const tailPiece = 4 << 10

// sliceReader reads f from pos to end, and then the rest of the line that
// runs over end, through its newline, and no more.
type sliceReader struct {
	f        io.ReaderAt
	pos, end int64  // pos: the next byte to read of f
	pending  []byte // read, not yet returned (skipLine's)
	last     byte   // the last byte returned ('\n' before the first)
	done     bool
}

// skipLine passes the rest of the line at pos, through its newline; when
// it runs to end, the slice holds no line's start, and is done.
func (s *sliceReader) skipLine() error {
	buf := make([]byte, 64<<10)
	for s.pos < s.end {
		n, err := s.f.ReadAt(buf[:min(int64(len(buf)), s.end-s.pos)], s.pos)
		s.pos += int64(n)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			s.pending = buf[i+1 : n]
			s.done = s.pos-int64(len(s.pending)) >= s.end
			return nil
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	s.done = true
	return nil
}

func (s *sliceReader) Read(p []byte) (int, error) {
	if len(s.pending) > 0 && len(p) > 0 {
		n := copy(p, s.pending)
		s.pending = s.pending[n:]
		s.last = p[n-1]
		return n, nil
	}
	if s.done || len(p) == 0 {
		return 0, io.EOF
	}
	if s.pos >= s.end && s.last == '\n' {
		s.done = true // the slice ends at a line's end
		return 0, io.EOF
	}
	past := s.pos >= s.end
	if past {
		p = p[:min(len(p), tailPiece)]
	} else {
		p = p[:min(int64(len(p)), s.end-s.pos)]
	}
	n, err := s.f.ReadAt(p, s.pos)
	if past {
		if i := bytes.IndexByte(p[:n], '\n'); i >= 0 {
			n, err, s.done = i+1, nil, true
		}
	}
	if n > 0 {
		s.pos += int64(n)
		s.last = p[n-1]
	}
	if err == io.EOF {
		s.done = true
		if n > 0 {
			err = nil
		}
	}
	return n, err
}

// where names a line for a message: its number, or in a slice, whose
// lines' numbers are not known, its byte offset.
func (r *jsonlReader) where(lineNo int, at int64) string {
	if r.sliced {
		return fmt.Sprintf("the line at byte %d", at)
	}
	return fmt.Sprintf("line %d", lineNo)
}

// corpusAt names the corpus and a line of it, for a message.
func (r *jsonlReader) corpusAt(lineNo int, at int64) string {
	if r.sliced {
		return fmt.Sprintf("corpus %s, %s", r.name, r.where(lineNo, at))
	}
	return fmt.Sprintf("corpus %s %s", r.name, r.where(lineNo, at))
}

func (r *jsonlReader) close() { r.f.Close() }

// read appends the next records to batch until full says it holds
// enough (given its records and their bytes; nil: never), or the corpus
// ends; done says it ended.
func (r *jsonlReader) read(batch *recordBatch, full func(records int, bytes int64) bool) (done bool, err error) {
	name, o, limit := r.name, r.o, r.limit
	// The map and the records' room are as large as the last batch's:
	// grown from nothing for every chunk of a stream, they were 11% of
	// what an ingest of 1,000,000 short documents allocated.
	if r.seen == nil {
		r.seen = make(map[string][2]int, r.lastRecords)
	}
	clear(r.seen)
	if batch.records == nil && r.lastRecords > 0 {
		batch.records = make([]wdsRecord, 0, r.lastRecords)
	}
	defer func() { r.lastRecords = max(r.lastRecords, len(batch.records)) }()
	var bytesRead int64
	for {
		if full != nil && full(len(batch.records), bytesRead) {
			_, err := r.br.Peek(1) // the corpus may end here: then this batch is its last
			return err == io.EOF, nil
		}
		b, err := r.br.ReadBytes('\n')
		if len(b) == 0 && err == io.EOF {
			return true, nil
		}
		r.lineNo++
		lineNo, at := r.lineNo, r.off
		corpus := func() string { return r.corpusAt(lineNo, at) }
		if long := (*LineTooLongError)(nil); errors.As(err, &long) {
			// The long line may lie past the one read: bufio reads ahead.
			lineNo, at = long.Line, r.start+long.At
			return false, fmt.Errorf("%s: longer than %d bytes, so its record cannot fit --max-record-size %d (a line may take twice the record's bytes, for escapes, and 64KiB for its fields); it was refused before it was read whole: raise --max-record-size, or split the record", corpus(), maxLineFor(limit), limit)
		}
		if errors.As(err, new(changedFileError)) { // it names the corpus
			return false, err
		}
		if err != nil && err != io.EOF {
			return false, fmt.Errorf("%s: %w", corpus(), err)
		}
		r.off += int64(len(b))
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		key, names, bodies, fields, err := jsonlRecord(b, o, lineNo)
		if err != nil {
			return false, fmt.Errorf("%s: %v", corpus(), err)
		}
		if err := manifest.CheckKey(key); err != nil {
			return false, fmt.Errorf("%s: key %q: %v", corpus(), key, err)
		}
		if prev, dup := r.seen[key]; dup {
			return false, fmt.Errorf("%s: key %q again, after %s: two records with one key; give every record its own --key", corpus(), key, r.where(prev[0], int64(prev[1])))
		}
		r.seen[key] = [2]int{lineNo, int(at)}
		rec := wdsRecord{key: key, off: at, line: lineNo, lineLen: int64(len(b))}
		if r.sliced {
			rec.line = 0 // not known: messages name the line's offset (Item.recordAt)
		}
		if err := batch.setFields(&rec, fields, name); err != nil {
			return false, err
		}
		if err := batch.addMembers(&rec, names, bodies, limit); err != nil {
			return false, fmt.Errorf("%s: %v", corpus(), err)
		}
		batch.records = append(batch.records, rec)
		size := int64(0)
		for _, m := range rec.members {
			size += int64(m.Size)
		}
		bytesRead += size
		if r.made != nil {
			r.made.add(at, size, bodies)
		}
		releaseHuge(rec.lineLen)
	}
}

// hugeRecord is the size from which a record's transient copies (its
// line, a decoded string) are handed back to the OS as soon as it is
// read, instead of when the collector next runs.
const hugeRecord = 64 << 20

// releaseHuge returns the garbage of reading a record of size bytes to the
// OS when the record is huge. The collector lets the heap grow to twice
// what was live at its last run before it runs again: after a 1 GiB line,
// the line's copies and the next allocations added up to 9 GB of RSS
// (issue 55 item 5). A collection costs milliseconds; reading the record
// took seconds.
func releaseHuge(size int64) {
	if size >= hugeRecord {
		debug.FreeOSMemory()
	}
}

// recordsMadeAgain counts the records readJSONLRecord made again from
// their lines (tests: a streamed corpus makes only those over madeRecord
// again).
var recordsMadeAgain atomic.Int64

// readJSONLRecord makes a JSONL record's bytes again, from its line, into p.
func readJSONLRecord(it *Item, memberNames []string, p []byte, o ScanOptions, open func(string) (io.ReaderAt, error)) error {
	recordsMadeAgain.Add(1)
	f, err := open(it.Path)
	if err != nil {
		return err
	}
	line := make([]byte, it.lineLen)
	if _, err := f.ReadAt(line, it.lineAt); err != nil {
		return fmt.Errorf("read record %q: %s: %w (did the corpus change during ingest?)", it.Key, it.recordAt(), err)
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
	b, ok := plainFieldsJSON(fields)
	if !ok {
		var err error
		if b, err = json.Marshal(fields); err != nil {
			return nil, nil, err
		}
	}
	return append(names, FieldsMember), append(bodies, b), nil
}

// plainFieldsJSON is json.Marshal(fields), byte for byte, for the fields
// most records hold: numbers, booleans, nulls, and keys and strings of
// printable ASCII that json.Marshal writes as they are. ok is false for
// any other value (json.Marshal then writes it). A profile of a JSONL
// ingest of 1,000,000 short documents put 7% of its CPU in json.Marshal's
// reflection over these maps (issue 59).
func plainFieldsJSON(fields map[string]any) (b []byte, ok bool) {
	var keysBuf [8]string
	keys := keysBuf[:0]
	n := 2
	for k, v := range fields {
		if !plainJSONText(k) {
			return nil, false
		}
		keys = append(keys, k)
		n += len(k) + 4
		switch v := v.(type) {
		case nil, bool:
			n += 5
		case string:
			if !plainJSONText(v) {
				return nil, false
			}
			n += len(v) + 2
		case json.Number:
			if !isJSONNumber(string(v)) {
				return nil, false // json.Marshal names what is wrong with it
			}
			n += len(v)
		default:
			return nil, false
		}
	}
	slices.Sort(keys)
	b = make([]byte, 0, n)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
		switch v := fields[k].(type) {
		case nil:
			b = append(b, "null"...)
		case bool:
			b = strconv.AppendBool(b, v)
		case string:
			b = append(b, '"')
			b = append(b, v...)
			b = append(b, '"')
		case json.Number:
			b = append(b, v...)
		}
	}
	return append(b, '}'), true
}

// plainJSONText says whether json.Marshal writes s between quotes as it
// is: printable ASCII but the quote, the backslash and the three bytes
// it escapes for HTML (<, >, &).
func plainJSONText(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// isJSONNumber says whether s is a number as JSON writes it, which
// json.Marshal writes as it is for a json.Number.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - j
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
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

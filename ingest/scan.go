// Package ingest turns a labelled source (an ImageFolder tree or a .csv /
// .jsonl listing) into a committed dataset: it places samples into shards by
// a seeded stratified shuffle, erasure-codes each shard, uploads all
// fragments in parallel with bounded memory, and writes the manifest to
// every store last. That write is the commit: an ingest killed at any moment
// leaves no visible dataset, and the next ingest of the same name removes
// what it left behind.
package ingest

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/shardfs/shardfs/manifest"
)

// Item is one sample of the source.
type Item struct {
	Path   string   // file to read
	Key    string   // relative path, the sample's key
	Labels []string // one per Source.LabelFields
	Size   int64
}

// Source is a scanned input.
type Source struct {
	Root        string
	LabelFields []string
	Items       []Item

	indexOnce sync.Once
	index     map[string]int // key -> item, built by keyIndex
}

// ErrEmpty: the source holds no samples.
var ErrEmpty = errors.New("no samples found")

// Scan reads src: a directory SRC/<label>/<file...>, or a listing file
// ending in .csv (columns path,label[,more labels]; an optional header row
// starting with "path" names the label columns) or .jsonl (objects with
// "path" and the label fields, default "label"). Listed paths are relative
// to the listing's directory and become the keys.
func Scan(src string, labelFields []string) (*Source, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", src, err)
	}
	var s *Source
	switch {
	case fi.IsDir():
		s, err = scanTree(src)
	case strings.HasSuffix(src, ".csv"):
		s, err = scanCSV(src, labelFields)
	case strings.HasSuffix(src, ".jsonl"):
		s, err = scanJSONL(src, labelFields)
	default:
		return nil, fmt.Errorf("source %s: not a directory, .csv or .jsonl file", src)
	}
	if err != nil {
		return nil, err
	}
	if len(s.Items) == 0 {
		return nil, fmt.Errorf("source %s: %w: expected %s/<class>/<file> or a .csv/.jsonl listing of path,label", src, ErrEmpty, src)
	}
	seen := make(map[string]string, len(s.Items))
	for _, it := range s.Items {
		if err := manifest.CheckKey(it.Key); err != nil {
			return nil, fmt.Errorf("source %s: %v: keys must be relative paths inside the source", src, err)
		}
		if prev, dup := seen[it.Key]; dup {
			return nil, fmt.Errorf("source %s: duplicate key %q (from %s and %s): every sample needs its own path", src, it.Key, prev, it.Path)
		}
		seen[it.Key] = it.Path
		for i, l := range it.Labels {
			if err := checkLabel(l); err != nil {
				return nil, fmt.Errorf("source %s: sample %q has label %s=%q: %v", src, it.Key, s.LabelFields[i], l, err)
			}
		}
		if it.Size > manifest.MaxShardSize {
			return nil, fmt.Errorf("source %s: sample %q is %d bytes; samples up to %d bytes are supported", src, it.Key, it.Size, int64(manifest.MaxShardSize))
		}
	}
	return s, nil
}

// checkLabel accepts a label that can name a directory and a stratum:
// non-empty, not "." or "..", without '/', NUL or other control characters.
func checkLabel(l string) error {
	if l == "" || l == "." || l == ".." || strings.ContainsRune(l, '/') {
		return errors.New(`labels must be non-empty, not "." or "..", and contain no '/'`)
	}
	for _, r := range l {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("labels may not contain control characters such as newlines (found %q)", r)
		}
	}
	return nil
}

// scanTree walks root/<class>/<file...>. Symlinked class directories (and
// symlinked directories below them) are followed, as torchvision's
// ImageFolder does; a directory reached twice is refused as a loop.
func scanTree(root string) (*Source, error) {
	s := &Source{Root: root, LabelFields: []string{"label"}}
	visited := map[string]bool{}
	if real, err := filepath.EvalSymlinks(root); err == nil {
		visited[real] = true
	}
	err := walkTree(s, root, root, "", visited)
	return s, err
}

// walkTree adds the files below dir, whose key prefix is prefix ("" at the root).
func walkTree(s *Source, root, dir, prefix string, visited map[string]bool) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("source %s: %w", root, err)
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		key := path.Join(prefix, filepath.ToSlash(rel))
		if d.Type()&fs.ModeSymlink != 0 {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				real, err := filepath.EvalSymlinks(p)
				if err != nil {
					return fmt.Errorf("source %s: %w", root, err)
				}
				if visited[real] {
					return fmt.Errorf("source %s: symlinked directory %s leads to %s, which is already part of the source (a loop or a duplicate)", root, key, real)
				}
				visited[real] = true
				return walkTree(s, root, p+"/", key, visited)
			}
		}
		label, _, nested := strings.Cut(key, "/")
		if !nested {
			return fmt.Errorf("source %s: file %s is not inside a class directory: expected %s/<class>/<file>", root, key, root)
		}
		fi, err := os.Stat(p) // follows symlinks
		if err != nil {
			return fmt.Errorf("source %s: %w", root, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("source %s: %s is not a regular file", root, rel)
		}
		s.Items = append(s.Items, Item{Path: p, Key: key, Labels: []string{label}, Size: fi.Size()})
		return nil
	})
}

func scanCSV(name string, labelFields []string) (*Source, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", name, err)
	}
	defer f.Close()
	r := csv.NewReader(bufio.NewReader(f))
	r.FieldsPerRecord = -1
	s := &Source{Root: filepath.Dir(name)}
	cols := []int{1}
	s.LabelFields = []string{"label"}
	for line := 1; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", name, err)
		}
		if line == 1 && len(rec) > 0 && strings.EqualFold(strings.TrimSpace(rec[0]), "path") {
			cols, s.LabelFields, err = pickColumns(rec, labelFields)
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", name, err)
			}
			continue
		}
		var labels []string
		for _, c := range cols {
			if c >= len(rec) {
				return nil, fmt.Errorf("listing %s line %d: %d columns, want path and %d label(s)", name, line, len(rec), len(cols))
			}
			labels = append(labels, strings.TrimSpace(rec[c]))
		}
		it, err := listedItem(s.Root, strings.TrimSpace(rec[0]), labels)
		if err != nil {
			return nil, fmt.Errorf("listing %s line %d: %w", name, line, err)
		}
		s.Items = append(s.Items, it)
	}
	return s, nil
}

// pickColumns maps a header row to the label columns to use.
func pickColumns(header, want []string) ([]int, []string, error) {
	if len(want) == 0 {
		want = header[1:]
	}
	var cols []int
	for _, w := range want {
		i := -1
		for j, h := range header {
			if j > 0 && strings.TrimSpace(h) == w {
				i = j
			}
		}
		if i < 0 {
			return nil, nil, fmt.Errorf("label field %q is not in the header %v", w, header)
		}
		cols = append(cols, i)
	}
	if len(cols) == 0 {
		return nil, nil, fmt.Errorf("header %v has no label column", header)
	}
	return cols, want, nil
}

func scanJSONL(name string, labelFields []string) (*Source, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", name, err)
	}
	defer f.Close()
	if len(labelFields) == 0 {
		labelFields = []string{"label"}
	}
	s := &Source{Root: filepath.Dir(name), LabelFields: labelFields}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var obj map[string]any
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil {
			return nil, fmt.Errorf("listing %s line %d: %w", name, line, err)
		}
		p, ok := obj["path"].(string)
		if !ok {
			return nil, fmt.Errorf("listing %s line %d: no string field \"path\"", name, line)
		}
		var labels []string
		for _, lf := range labelFields {
			v, ok := obj[lf]
			if !ok {
				return nil, fmt.Errorf("listing %s line %d: no label field %q", name, line, lf)
			}
			l, err := jsonLabel(v)
			if err != nil {
				return nil, fmt.Errorf("listing %s line %d: label field %q: %v", name, line, lf, err)
			}
			labels = append(labels, l)
		}
		it, err := listedItem(s.Root, p, labels)
		if err != nil {
			return nil, fmt.Errorf("listing %s line %d: %w", name, line, err)
		}
		s.Items = append(s.Items, it)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("listing %s: %w", name, err)
	}
	return s, nil
}

// jsonLabel accepts a string, number or boolean label; null, lists and
// objects have no single name to become a class.
func jsonLabel(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return fmt.Sprint(v), nil
	case nil:
		return "", errors.New("is null: every sample needs a label (a string or a number)")
	default:
		return "", fmt.Errorf("is a %T (%v): a label must be a string or a number", v, v)
	}
}

// listedItem checks a listed path before touching the file system with it.
func listedItem(root, p string, labels []string) (Item, error) {
	if err := manifest.CheckKey(p); err != nil {
		return Item{}, fmt.Errorf("path: %v: list paths relative to the listing's directory", err)
	}
	key := path.Clean(p)
	full := filepath.Join(root, filepath.FromSlash(key))
	fi, err := os.Stat(full)
	if err != nil {
		return Item{}, err
	}
	if !fi.Mode().IsRegular() {
		return Item{}, fmt.Errorf("%s is not a regular file", full)
	}
	return Item{Path: full, Key: key, Labels: labels, Size: fi.Size()}, nil
}

// strata groups items by their label tuple; strata are sorted by name so
// their indexes do not depend on input order.
func (s *Source) strata() ([]manifest.Stratum, []uint32) {
	index := map[string]int{}
	var names []string
	labelsOf := map[string][]string{}
	for _, it := range s.Items {
		n := strings.Join(it.Labels, "+")
		if _, ok := labelsOf[n]; !ok {
			labelsOf[n] = it.Labels
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([]manifest.Stratum, len(names))
	for i, n := range names {
		index[n] = i
		out[i] = manifest.Stratum{Name: n, Labels: labelsOf[n]}
	}
	of := make([]uint32, len(s.Items))
	for i, it := range s.Items {
		of[i] = uint32(index[strings.Join(it.Labels, "+")])
		out[of[i]].Count++
	}
	return out, of
}

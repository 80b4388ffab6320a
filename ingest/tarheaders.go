package ingest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/bits"
	"strconv"
	"strings"

	"github.com/shardfs/shardfs/verify"
)

// tarHeader is what the scan of a WebDataset shard takes from a member's
// header: its name, size and type, and where its bytes start.
type tarHeader struct {
	name     string
	size     int64
	typeflag byte
	dataAt   int64
	// sparse: the member is a GNU sparse file (PAX sparse 0.0, 0.1 or 1.0,
	// or old GNU type 'S'): its bytes in the archive are a map and the
	// data between its holes, not its content, so no offset in the shard
	// holds what the member means.
	sparse bool
}

// tarHeaders reads a tar stream's members, front to back: next moves to
// the next member (io.EOF at the end of the archive), body reads the
// current member's bytes whole, and sum reads them as they stream by,
// returning crc continued over them (verify.Update) and, when keep is not
// nil, appending them to *keep (a scan that keeps what it reads: pieces.go).
type tarHeaders interface {
	next() (tarHeader, error)
	body() ([]byte, error)
	sum(crc uint32, keep *[]byte) (uint32, error)
}

// stdTarHeaders is archive/tar: every tar it reads, it reads as the
// standard library does (PAX, GNU long names, sparse files, old formats).
type stdTarHeaders struct {
	in  *countingReader
	tr  *tar.Reader
	buf []byte // sum's
}

func newStdTarHeaders(r io.Reader) *stdTarHeaders {
	in := &countingReader{r: r}
	return &stdTarHeaders{in: in, tr: tar.NewReader(in)}
}

func (s *stdTarHeaders) next() (tarHeader, error) {
	h, err := s.tr.Next()
	if err != nil {
		return tarHeader{}, err
	}
	// The tar reader reads exactly a member's header blocks, so after
	// Next the count is where the member's bytes start.
	return tarHeader{name: h.Name, size: h.Size, typeflag: h.Typeflag, dataAt: s.in.n, sparse: isSparse(h)}, nil
}

// isSparse is whether archive/tar reads h as a sparse file: as its
// handleSparseFile decides, by the old GNU type or by any PAX record of
// the GNU.sparse family (0.0 and 0.1 name their map there, 1.0 its
// version; a record of the family that archive/tar ignores is refused
// too, since a writer that sets one meant a sparse member).
func isSparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

func (s *stdTarHeaders) body() ([]byte, error) { return io.ReadAll(s.tr) }

func (s *stdTarHeaders) sum(crc uint32, keep *[]byte) (uint32, error) {
	if s.buf == nil {
		s.buf = make([]byte, 64<<10) // one for the shard, not one a member
	}
	return continueCRC(crc, s.tr, s.buf, keep)
}

// continueCRC is crc continued over what r reads, through buf, appended
// to *keep as well when keep is not nil.
func continueCRC(crc uint32, r io.Reader, buf []byte, keep *[]byte) (uint32, error) {
	for {
		n, err := r.Read(buf)
		crc = verify.Update(crc, buf[:n])
		if keep != nil {
			*keep = append(*keep, buf[:n]...)
		}
		if err == io.EOF {
			return crc, nil
		}
		if err != nil {
			return crc, err
		}
	}
}

// errNotPlain is plainTarHeaders declining a shard: it holds a header
// that plainTarHeaders does not read itself, or ends where a plain
// archive does not, so archive/tar reads the shard again from its start.
var errNotPlain = errors.New("not a plain ustar or GNU tar")

// plainTarHeaders reads the headers of a plain tar, the kind WebDataset
// writers make (Python's tarfile, GNU tar, Go's archive/tar: ustar or GNU
// headers of regular files and directories, octal numbers, PAX headers of
// times only), and takes
// exactly what archive/tar takes from them; at any other header, or an
// archive that ends anywhere but after a header's data or on two zero
// blocks, it returns errNotPlain. It exists for speed: archive/tar's
// header parsing was 40% of a 100,000-record scan's CPU in a profile (15%
// in its rune-by-rune check that a header block is ASCII, which only
// guesses the header's format, and the scan does not use the format).
// FuzzPlainTarHeaders holds it to archive/tar byte for byte.
type plainTarHeaders struct {
	br   *bufio.Reader
	at   int64 // the offset of the next byte br gives
	skip int64 // where the next header starts: after the current member's data and padding
	cur  tarHeader
}

var zeroBlock [512]byte

func (p *plainTarHeaders) next() (tarHeader, error) {
	if n := p.skip - p.at; n > 0 {
		got, err := p.br.Discard(int(n))
		p.at += int64(got)
		if err != nil {
			return tarHeader{}, errNotPlain
		}
	}
	blk, err := p.block()
	if err == io.EOF {
		return tarHeader{}, io.EOF // no byte past the last member: archive/tar ends here too
	}
	if err != nil {
		return tarHeader{}, errNotPlain
	}
	if *blk == zeroBlock {
		blk, err := p.block()
		if err == io.EOF || (err == nil && *blk == zeroBlock) {
			return tarHeader{}, io.EOF
		}
		return tarHeader{}, errNotPlain
	}
	h, ok := parsePlainHeader(blk)
	if !ok {
		return tarHeader{}, errNotPlain
	}
	if h.typeflag == tar.TypeXHeader {
		// A PAX header of times only (what Python's tarfile writes for a
		// file's fractional mtime), then the member's own header, which
		// the times do not change.
		if !p.timesOnly(h.size) {
			return tarHeader{}, errNotPlain
		}
		blk, err := p.block()
		if err != nil {
			return tarHeader{}, errNotPlain
		}
		if h, ok = parsePlainHeader(blk); !ok || h.typeflag == tar.TypeXHeader {
			return tarHeader{}, errNotPlain
		}
	}
	h.dataAt = p.at
	p.cur = h
	p.skip = p.at + (h.size+511)/512*512
	return h, nil
}

// block reads the next 512-byte block in place (valid until the next
// read): io.EOF when no byte is left, io.ErrUnexpectedEOF when less than a
// block is.
func (p *plainTarHeaders) block() (*[512]byte, error) {
	b, err := p.br.Peek(512)
	if len(b) < 512 {
		if len(b) == 0 && err == io.EOF {
			return nil, io.EOF
		}
		return nil, io.ErrUnexpectedEOF
	}
	p.br.Discard(512)
	p.at += 512
	return (*[512]byte)(b), nil
}

// maxPlainPAX bounds the PAX headers plainTarHeaders reads (a few records
// of times; at most bufio's default buffer, so Peek holds it); archive/tar
// reads larger ones.
const maxPlainPAX = 4096

// timesOnly reads a PAX header's records (size bytes, and the padding to
// the next block) and says whether they are records of times (mtime,
// atime, ctime) alone, each as archive/tar reads it without error: the
// record's length in decimal without a leading zero, then key=value and a
// newline; a value of up to 18 digits of seconds, and maybe a '.' and
// digits. Such records change nothing the scan takes from the member.
func (p *plainTarHeaders) timesOnly(size int64) bool {
	if size <= 0 || size > maxPlainPAX {
		return false
	}
	padded := int((size + 511) / 512 * 512)
	buf, err := p.br.Peek(padded) // in place, as block reads: one per member in Python's shards
	if err != nil {
		return false
	}
	p.br.Discard(padded)
	p.at += int64(padded)
	recs := buf[:size]
	for len(recs) > 0 {
		sp := bytes.IndexByte(recs, ' ')
		if sp < 1 || sp > 6 || recs[0] == '0' || !allDigits(recs[:sp]) {
			return false
		}
		n, _ := strconv.Atoi(string(recs[:sp]))
		if n > len(recs) || n < sp+4 || recs[n-1] != '\n' {
			return false
		}
		key, value, ok := bytes.Cut(recs[sp+1:n-1], []byte("="))
		if !ok {
			return false
		}
		switch string(key) {
		case "mtime", "atime", "ctime":
		default:
			return false
		}
		secs, frac, _ := bytes.Cut(value, []byte("."))
		if len(secs) == 0 || len(secs) > 18 || !allDigits(secs) || !allDigits(frac) {
			return false
		}
		recs = recs[n:]
	}
	return true
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func (p *plainTarHeaders) body() ([]byte, error) {
	if p.at != p.cur.dataAt {
		return nil, errNotPlain
	}
	b := make([]byte, p.cur.size)
	n, err := io.ReadFull(p.br, b)
	p.at += int64(n)
	if err != nil {
		return nil, errNotPlain
	}
	return b, nil
}

// sum reads the current member's bytes in place (through bufio's buffer,
// as Discard would read them), continuing crc over them.
func (p *plainTarHeaders) sum(crc uint32, keep *[]byte) (uint32, error) {
	if p.at != p.cur.dataAt {
		return 0, errNotPlain
	}
	for left := p.cur.size; left > 0; {
		b, _ := p.br.Peek(int(min(left, int64(p.br.Size()))))
		if len(b) == 0 { // cut short or unreadable: archive/tar says which
			return 0, errNotPlain
		}
		crc = verify.Update(crc, b)
		if keep != nil {
			*keep = append(*keep, b...)
		}
		p.br.Discard(len(b))
		p.at += int64(len(b))
		left -= int64(len(b))
	}
	return crc, nil
}

// parsePlainHeader reads a ustar or GNU header block of a regular file, a
// directory or a PAX header, as archive/tar's Reader.readHeader and Next
// do, and says whether it is one: a valid checksum; ustar's or GNU's magic
// (not the old V7 format, not star's); type '0', 'x', or '5' with size 0; every numeric
// field archive/tar parses in plain octal (no base-256), and GNU's access
// and change times unset. The name is the name field up to its first NUL,
// after ustar's prefix field and a '/' when that is set.
func parsePlainHeader(blk *[512]byte) (tarHeader, bool) {
	sum, ok := plainOctal(blk[148:156])
	if !ok {
		return tarHeader{}, false
	}
	unsigned, signed := headerSums(blk)
	if sum != unsigned && sum != signed {
		return tarHeader{}, false
	}
	magic, version, trailer := string(blk[257:263]), string(blk[263:265]), string(blk[508:512])
	ustar := false
	switch {
	case magic == "ustar\x00" && trailer == "tar\x00":
		return tarHeader{}, false // star
	case magic == "ustar\x00":
		ustar = true
	case magic == "ustar " && version == " \x00":
		if blk[345] != 0 || blk[357] != 0 {
			return tarHeader{}, false // GNU access or change time: archive/tar may read a prefix there
		}
	default:
		return tarHeader{}, false // V7
	}
	typeflag := blk[156]
	if typeflag != tar.TypeReg && typeflag != tar.TypeDir && typeflag != tar.TypeXHeader {
		return tarHeader{}, false
	}
	// mode, uid, gid, size, mtime, devmajor, devminor
	for _, f := range [][2]int{{100, 108}, {108, 116}, {116, 124}, {136, 148}, {329, 337}, {337, 345}} {
		if _, ok := plainOctal(blk[f[0]:f[1]]); !ok {
			return tarHeader{}, false
		}
	}
	size, ok := plainOctal(blk[124:136])
	if !ok || (typeflag == tar.TypeDir && size != 0) {
		return tarHeader{}, false
	}
	name := cString(blk[0:100])
	if ustar {
		if prefix := cString(blk[345:500]); prefix != "" {
			name = prefix + "/" + name
		}
	}
	return tarHeader{name: name, size: size, typeflag: typeflag}, true
}

// headerSums are a header block's checksums as archive/tar computes them
// (its bytes summed unsigned and signed, the checksum field counted as
// eight spaces), eight bytes at a time: in each word, the bytes summed in
// four 16-bit lanes (64 words of at most 2*255 a lane fit in 16 bits), and
// the bytes of 0x80 and over counted, each 256 less when signed.
func headerSums(blk *[512]byte) (unsigned, signed int64) {
	const lanes, high = 0x00ff00ff00ff00ff, 0x8080808080808080
	var acc uint64
	var neg int
	for i := 0; i < 512; i += 8 {
		w := binary.LittleEndian.Uint64(blk[i:])
		if i == 144 { // bytes 148..151 are checksum
			w = w&0x00000000ffffffff | 0x2020202000000000
		} else if i == 152 { // bytes 152..155 are checksum
			w = w&0xffffffff00000000 | 0x0000000020202020
		}
		acc += w&lanes + (w>>8)&lanes
		neg += bits.OnesCount64(w & high)
	}
	acc = acc&0x0000ffff0000ffff + (acc>>16)&0x0000ffff0000ffff
	unsigned = int64(acc&0xffffffff + acc>>32)
	return unsigned, unsigned - 256*int64(neg)
}

// plainOctal is a tar numeric field in octal: NULs and spaces either side
// of octal digits only (archive/tar reads any other octal field too, and
// a base-256 one; those are left to it).
func plainOctal(b []byte) (int64, bool) {
	b = bytes.Trim(b, " \x00")
	if len(b) == 0 {
		return 0, true
	}
	if len(b) > 20 {
		return 0, false // past 2^60: no field archive/tar reads as octal is this long
	}
	var x int64
	for _, c := range b {
		if c < '0' || c > '7' {
			return 0, false
		}
		x = x<<3 | int64(c-'0')
	}
	return x, true
}

// cString is b up to its first NUL.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

package ingest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkScanWebDataset_1000x64KiB is the scan of one WebDataset shard
// of 1,000 records (a 64 KiB .bin and a .json each), from a local file:
// the headers, the fields and, since issue 55, a CRC32C of every member's
// bytes as they stream by (the checksum the upload holds the record to).
func BenchmarkScanWebDataset_1000x64KiB(b *testing.B) {
	var members [][2]string
	body := strings.Repeat("x", 64<<10)
	for i := range 1000 {
		members = append(members, [2]string{fmt.Sprintf("%06d.bin", i), body}, [2]string{fmt.Sprintf("%06d.json", i), fmt.Sprintf(`{"source": "s%d"}`, i%3)})
	}
	p := filepath.Join(b.TempDir(), "shard.tar")
	shard := goTar(b, 0, members...)
	if err := os.WriteFile(p, shard, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(shard)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := scanWebDataset([]string{p}, ScanOptions{Strata: []string{"source"}}); err != nil {
			b.Fatal(err)
		}
	}
}

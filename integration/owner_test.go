package integration

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/mount"
)

// Issue 42: the order's checks ran only on the CLI path (mount.Config's
// CheckOrder closure), so mount.Open called from Go served a resume point
// past the last epoch, and a batch larger than the epoch. Now both go
// through repository.PlanOrder: an in-process mount is refused with the
// error the CLI prints, word for word once the options are named by their
// flags.
func TestMountFromGoRefusesWhatTheCLIRefuses(t *testing.T) {
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	src := writeSource(t, synth.Imbalanced(60, 3, 0.7, 500, 2_000, 5)) // 60 samples
	if r := run(t, time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", src, "train"); r.code != 0 {
		t.Fatalf("ingest: %v", r)
	}
	flags := map[layout.Option]string{layout.OptResume: "--resume-at", layout.OptEpochs: "--epochs", layout.OptBatch: "--batch-size"}
	for _, tc := range []struct {
		name   string
		spec   layout.Spec
		args   []string
		option layout.Option
	}{
		{"a resume point past the last epoch",
			layout.Spec{Base: layout.Params{World: 1, Batch: 8, Alpha: 1}, ResumeEpoch: 5, Epochs: 1, Ranks: []int{0}},
			[]string{"--batch-size=8", "--epochs=1", "--resume-at=5:0"}, layout.OptResume},
		{"a batch larger than the epoch",
			layout.Spec{Base: layout.Params{World: 1, Batch: 100, Alpha: 1, Tail: layout.Pad}, ResumeEpoch: -1, Epochs: 1, Ranks: []int{0}},
			[]string{"--batch-size=100", "--epochs=1", "--tail=pad"}, layout.OptBatch},
		{"a resume point past the end of its epoch",
			layout.Spec{Base: layout.Params{World: 1, Batch: 8, Alpha: 1}, ResumeEpoch: 0, ResumeSkip: 500, Epochs: 1, Ranks: []int{0}},
			[]string{"--batch-size=8", "--epochs=1", "--resume-at=0:500"}, layout.OptResume},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mt, err := mount.Open(t.Context(), c.clients(t), dir, mount.Config{Name: "train", Spec: &tc.spec, CacheSize: 64 << 20, ReadTimeout: 30 * time.Second})
			if err == nil {
				mt.Close()
				t.Fatal("mount.Open served it")
			}
			var se *layout.SpecError
			if !errors.As(err, &se) || se.Option != tc.option {
				t.Fatalf("mount.Open: %v (%T), want a *layout.SpecError about %q", err, err, tc.option)
			}
			if strings.Contains(err.Error(), "--") {
				t.Fatalf("mount.Open's error names flags, not the library's options: %v", err)
			}
			want := se.In(func(o layout.Option) string { return flags[o] })
			mnt := t.TempDir()
			t.Cleanup(func() { exec.Command("fusermount3", "-uz", mnt).Run() })
			for _, cmd := range [][]string{append([]string{"mount", stores}, append(tc.args, "train", mnt)...), append([]string{"plan", stores}, append(tc.args, "train")...)} {
				r := run(t, time.Minute, nil, cmd...)
				if r.code != 1 || !strings.Contains(r.stderr, want) {
					t.Fatalf("shardfs %s: want exit 1 with mount.Open's error in flag names %q: %v", cmd[0], want, r)
				}
			}
		})
	}
}

package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows a bar on a terminal and plain lines (at most one per 5 s,
// plus the last) otherwise, so logs of batch jobs stay readable.
type progress struct {
	bar   *progressbar.ProgressBar
	w     io.Writer
	what  string
	total int64

	mu    sync.Mutex // guards done, last
	done  int64
	last  time.Time
	start time.Time
}

func newProgress(what string, total int64) *progress {
	p := &progress{w: os.Stderr, what: what, total: total, start: time.Now(), last: time.Now()}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription(what),
			progressbar.OptionShowBytes(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish())
	}
	return p
}

func (p *progress) Add(n int64) {
	if p.bar != nil {
		p.bar.Add64(n)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if time.Since(p.last) >= 5*time.Second || p.done == p.total {
		p.last = time.Now()
		if p.total < 0 {
			fmt.Fprintf(p.w, "%s: %s\n", p.what, humanize.IBytes(uint64(p.done)))
			return
		}
		fmt.Fprintf(p.w, "%s: %s / %s (%.0f%%)\n", p.what, humanize.IBytes(uint64(p.done)), humanize.IBytes(uint64(p.total)),
			100*float64(p.done)/float64(max(p.total, 1)))
	}
}

func (p *progress) Finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

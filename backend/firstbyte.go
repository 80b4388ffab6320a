package backend

import (
	"context"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// FirstByte records when the first byte of a read's answer arrived. A
// caller passes one in the context of a ReadAt (WithFirstByte) to tell a
// store that has not answered yet from one whose answer is still streaming:
// the first is slow, the second only shares the bandwidth with the caller's
// other reads. Stores that cannot tell (file://) leave it unset.
type FirstByte struct{ at atomic.Int64 }

// Arrived reports whether the first byte has arrived.
func (f *FirstByte) Arrived() bool { return f != nil && f.at.Load() != 0 }

// ArrivedAfter reports whether the first byte arrived after t.
func (f *FirstByte) ArrivedAfter(t time.Time) bool {
	return f != nil && f.at.Load() > t.UnixNano()
}

// Since is the time from start to the first byte, if it arrived.
func (f *FirstByte) Since(start time.Time) (time.Duration, bool) {
	if !f.Arrived() {
		return 0, false
	}
	return time.Unix(0, f.at.Load()).Sub(start), true
}

type firstByteKey struct{}

// WithFirstByte returns a context under which ReadAt records into f when the
// first byte of its answer arrives.
func WithFirstByte(ctx context.Context, f *FirstByte) context.Context {
	return context.WithValue(ctx, firstByteKey{}, f)
}

// MarkFirstByte records now as the first byte's arrival for ctx's FirstByte,
// for stores that know when their answer starts without a body to wrap.
func MarkFirstByte(ctx context.Context) {
	if f, _ := ctx.Value(firstByteKey{}).(*FirstByte); f != nil {
		f.at.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// traceFirstByte returns ctx with an HTTP client trace that marks ctx's
// FirstByte when the response's first byte arrives. HTTP stores need it
// because minio-go fills the caller's buffer in one Read: a mark on the
// first Read would come with the whole body.
func traceFirstByte(ctx context.Context) context.Context {
	f, _ := ctx.Value(firstByteKey{}).(*FirstByte)
	if f == nil {
		return ctx
	}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotFirstResponseByte: func() { f.at.CompareAndSwap(0, time.Now().UnixNano()) },
	})
}

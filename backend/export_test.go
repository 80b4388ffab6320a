package backend

import (
	"bytes"
	"context"
)

// StallProbes makes every probe call stall after its timeout has started
// and before it asks its store, until the returned func is called.
func StallProbes(stall func()) (restore func()) {
	probeAboutToAsk.Store(&stall)
	return func() { probeAboutToAsk.Store(nil) }
}

// PutClaiming writes body under key with the options a Put of claimed
// would have: its checksum header says claimed's CRC32C.
func (s *S3) PutClaiming(ctx context.Context, key string, claimed, body []byte) error {
	_, err := s.client.PutObject(ctx, s.bucket, s.prefix+key, bytes.NewReader(body), int64(len(body)), s.putOptions(claimed, true))
	return s.convert("write", key, err)
}

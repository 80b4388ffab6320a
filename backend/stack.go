package backend

import (
	"fmt"
	"strings"
	"time"
)

// StackOptions are the bounds every store a shardfs process uses is
// opened with: the request timeout and the requests in flight at once.
// Zero values take the defaults.
type StackOptions struct {
	RequestTimeout time.Duration // bound of a request that moves no bytes (DefaultRequestTimeout)
	Concurrency    int           // requests in flight at once (DefaultStoreConcurrency)
}

// Stack wraps s in the decorators every store is read and written
// through, in the one order that is right (the CLI's and a library
// caller's alike): Limit outside, then Retry of throttled requests, then
// Timeout. The limit is outside the retries and the timeout, so a
// request's time bound starts when it leaves the queue, and each attempt
// has one; our own load is never counted against a store as a timeout.
// Health, the layer that takes a failing store out of reads and probes it
// back, is the erasure reader's (erasure.NewReader), which owns the
// reads it steers.
func Stack(s Store, o StackOptions) *Limit {
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Concurrency < 1 {
		o.Concurrency = DefaultStoreConcurrency
	}
	return WithLimit(WithRetry(WithTimeout(s, o.RequestTimeout)), o.Concurrency)
}

// OpenStack opens stores by URL, each with the credentials creds gives
// for it (nil: the AWS environment), each behind Stack, and checks that
// no two are the same place.
func OpenStack(urls []string, creds func(url string) *Credentials, o StackOptions) ([]Store, error) {
	stores := make([]Store, 0, len(urls))
	for i, u := range urls {
		u = strings.TrimSpace(u)
		opts := OpenOptions{}
		if creds != nil {
			opts.Credentials = creds(u)
		}
		s, err := Open(u, opts)
		if err != nil {
			return nil, fmt.Errorf("store %d: %w", i, err)
		}
		stores = append(stores, Stack(s, o))
	}
	if err := CheckDistinct(stores); err != nil {
		return nil, err
	}
	return stores, nil
}

package backend

// What commands ask of a store beyond its objects: its bucket (ingest
// creates a missing one), its clock (doctor measures the skew) and the
// names at its top (list).

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// EnsureBucket creates the bucket of an S3 store when it does not exist,
// as restic's init and rclone's mkdir do, and reports whether it did. It
// finds the S3 store below s's decorators (Unwrap). Other stores have no
// bucket: a file:// store's directory is made when it is opened.
func EnsureBucket(ctx context.Context, s Store) (created bool, err error) {
	if st, ok := below[*S3](s); ok {
		return st.ensureBucket(ctx)
	}
	return false, nil
}

// RemoveIfEmpty takes back what opening s and EnsureBucket made, when s
// holds no object: the bucket EnsureBucket created (bucketCreated), or the
// directories a file:// store's opening created. A command that fails
// leaves the stores as it found them (issue 59: a refused ingest left an
// empty bucket on every fresh store). It removes nothing that holds an
// object, and nothing that was there before: S3 refuses to remove a
// bucket that is not empty, and a directory is removed only when empty.
// removed says whether it took anything back.
func RemoveIfEmpty(ctx context.Context, s Store, bucketCreated bool) (removed bool, err error) {
	if l, ok := below[*Local](s); ok {
		return l.removeIfEmpty()
	}
	if st, ok := below[*S3](s); ok && bucketCreated {
		err := st.client.RemoveBucket(ctx, st.bucket)
		if code := minio.ToErrorResponse(err).Code; code == "BucketNotEmpty" {
			return false, nil
		}
		if err != nil {
			return false, st.convert("remove bucket", "", err)
		}
		return true, nil
	}
	return false, nil
}

// below finds the store of type T below s's decorators (Unwrap), if s is one.
func below[T Store](s Store) (T, bool) {
	for {
		if t, ok := s.(T); ok {
			return t, true
		}
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			var none T
			return none, false
		}
		s = u.Unwrap()
	}
}

func (s *S3) ensureBucket(ctx context.Context) (bool, error) {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return false, s.convert("check bucket", "", err)
	}
	if ok {
		return false, nil
	}
	err = s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: s.region})
	if minio.ToErrorResponse(err).Code == "BucketAlreadyOwnedByYou" {
		return false, nil // made meanwhile, by another part of a distributed ingest
	}
	if err != nil {
		return false, s.convert("create bucket", "", err)
	}
	return true, nil
}

// ServerTime asks the S3 store below s's decorators for its clock (the Date
// header of an unsigned request to its endpoint), to measure the skew that
// makes signed requests fail. ok is false for stores without a clock
// (file://).
func ServerTime(ctx context.Context, s Store) (t time.Time, ok bool, err error) {
	if st, ok := below[*S3](s); ok {
		return st.serverTime(ctx)
	}
	return time.Time{}, false, nil
}

func (s *S3) serverTime(ctx context.Context) (time.Time, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, s.client.EndpointURL().String()+"/", nil)
	if err != nil {
		return time.Time{}, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return time.Time{}, false, &Error{Store: s.name, Op: "read the clock", Err: err}
	}
	resp.Body.Close()
	t, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		return time.Time{}, false, &Error{Store: s.name, Op: "read the clock", Err: fmt.Errorf("no Date header in its answer (%s)", resp.Status)}
	}
	return t, true, nil
}

// TopNames lists the first path elements of the keys in s — the names of
// the datasets it may hold — without listing every key: one delimited
// listing on S3, one directory read on file://. Other stores list nothing.
func TopNames(ctx context.Context, s Store) ([]string, error) {
	if st, ok := below[*S3](s); ok {
		return st.topNames(ctx)
	}
	if l, ok := below[*Local](s); ok {
		return l.topNames()
	}
	return nil, nil
}

func (s *S3) topNames(ctx context.Context) ([]string, error) {
	var names []string
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, Recursive: false}) {
		if obj.Err != nil {
			return nil, s.convert("list", "", obj.Err)
		}
		if name, ok := strings.CutSuffix(strings.TrimPrefix(obj.Key, s.prefix), "/"); ok && name != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

func (l *Local) topNames() ([]string, error) {
	entries, err := os.ReadDir(l.root)
	if err != nil {
		return nil, &Error{Store: l.name, Op: "list", Err: err}
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

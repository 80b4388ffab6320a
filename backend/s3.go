package backend

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/shardfs/shardfs/verify"
)

// Credentials for an S3 endpoint. They are never printed: String redacts them.
type Credentials struct {
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
	SessionToken    string `json:"session_token,omitempty"`
}

func (c Credentials) String() string { return "Credentials{redacted}" }

// GoString keeps %#v from printing secrets too.
func (c Credentials) GoString() string { return c.String() }

// S3Config configures an S3 store.
type S3Config struct {
	Endpoint string // host:port
	Secure   bool
	Bucket   string
	Prefix   string // without leading or trailing slash
	// Credentials, when nil, come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
	// AWS_SESSION_TOKEN, then the AWS shared credentials file.
	Credentials *Credentials
	// MaxRetries per request. Erasure coding absorbs failures, so the
	// default is 1 (no retry), not minio-go's 10.
	MaxRetries int
	// Region, if the endpoint needs one.
	Region string
}

// S3 is a Store on an S3-compatible bucket, through minio-go.
type S3 struct {
	client *minio.Client
	bucket string
	prefix string // "" or "dir/"
	name   string
	region string
	google bool // Google Cloud Storage's S3 API, which takes no checksum header
}

var _ Store = (*S3)(nil)

// NewS3 returns a store for cfg. It does no I/O.
func NewS3(cfg S3Config) (*S3, error) {
	name := redactedS3Name(cfg)
	if err := s3utils.CheckValidBucketName(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("store %s: bucket name %q: %v: S3 bucket names are 3-63 lowercase letters, digits, '.' and '-'", name, cfg.Bucket, err)
	}
	var creds *credentials.Credentials
	if cfg.Credentials != nil {
		c := cfg.Credentials
		creds = credentials.NewStaticV4(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{},
		})
	}
	tr, err := minio.DefaultTransport(cfg.Secure)
	if err != nil {
		return nil, err
	}
	tr.MaxIdleConnsPerHost = 256
	tr.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	retries := cfg.MaxRetries
	if retries <= 0 {
		retries = 1
	}
	google := s3utils.IsGoogleEndpoint(url.URL{Host: cfg.Endpoint})
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:           creds,
		Secure:          cfg.Secure,
		Transport:       tr,
		Region:          cfg.Region,
		BucketLookup:    minio.BucketLookupPath,
		MaxRetries:      retries,
		TrailingHeaders: !google, // for the checksum header (putOptions)
	})
	if err != nil {
		return nil, &Error{Store: name, Op: "configure", Err: err}
	}
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &S3{client: client, bucket: cfg.Bucket, prefix: prefix, name: name, region: cfg.Region, google: google}, nil
}

func redactedS3Name(cfg S3Config) string {
	scheme := "http"
	if cfg.Secure {
		scheme = "https"
	}
	p := cfg.Bucket
	if cfg.Prefix != "" {
		p += "/" + strings.Trim(cfg.Prefix, "/")
	}
	return fmt.Sprintf("%s://%s/%s", scheme, cfg.Endpoint, p)
}

func (s *S3) String() string { return s.name }

// throttled reports whether an S3 error response refuses a request for
// load, or fails it on the server's side, so that a later attempt may pass.
func throttled(resp minio.ErrorResponse) bool {
	switch resp.Code {
	case "SlowDown", "SlowDownRead", "SlowDownWrite", "ServiceUnavailable", "InternalError", "RequestTimeout",
		"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests", "RequestThrottled":
		return true
	}
	switch resp.StatusCode {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return true
	}
	return false
}

// convert maps a minio-go error to this package's sentinels.
func (s *S3) convert(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Store: s.name, Op: op, Key: key, Err: err}
	}
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		switch resp.Code {
		case "NoSuchKey", "NotFound":
			err = ErrNotExist
		case "NoSuchBucket":
			err = fmt.Errorf("%w %q: shardfs ingest creates it; else fix the store URL", ErrNoBucket, s.bucket)
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken":
			err = fmt.Errorf("%w (%s): check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the credentials in the config file", ErrAccessDenied, resp.Code)
		case "InvalidRange":
			err = ErrShortRead
		case "PreconditionFailed":
			err = ErrExists
		default:
			if resp.StatusCode == http.StatusNotFound {
				err = ErrNotExist
			} else if resp.StatusCode == http.StatusForbidden {
				err = fmt.Errorf("%w: check the credentials", ErrAccessDenied)
			} else if throttled(resp) {
				err = fmt.Errorf("%w (%w): %s (HTTP %d): %s", ErrUnavailable, ErrThrottled, resp.Code, resp.StatusCode, resp.Message)
			} else {
				err = fmt.Errorf("%w: %s (HTTP %d): %s", ErrUnavailable, resp.Code, resp.StatusCode, resp.Message)
			}
		}
		return &Error{Store: s.name, Op: op, Key: key, Err: err}
	}
	var uerr *url.Error
	var nerr net.Error
	if errors.As(err, &uerr) || errors.As(err, &nerr) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%w: %v: check that the endpoint is up and reachable", ErrUnavailable, err)
	}
	return &Error{Store: s.name, Op: op, Key: key, Err: err}
}

// ReadWhole is one GET of the object's first max bytes: the whole object
// when it is no larger, and its size from the reply's Content-Range. The
// request asks for no byte it will not read: a GET of the whole object,
// closed once its size showed it larger, cost every byte the store had
// sent by then (up to 2 MiB, measured on MinIO), and a shard scanned in
// pieces read its start twice (issue 59).
func (s *S3) ReadWhole(ctx context.Context, key string, max int64, into func(size int64) []byte) (int64, bool, error) {
	if err := CheckKey(key); err != nil {
		return 0, false, &Error{Store: s.name, Op: "read", Err: err}
	}
	if max <= 0 { // a range of no bytes cannot be asked for
		size, err := s.Stat(ctx, key)
		if err != nil {
			return 0, false, err
		}
		into(0)
		return size, size == 0, nil
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(0, max-1); err != nil {
		return 0, false, &Error{Store: s.name, Op: "read", Key: key, Err: err}
	}
	pins := pinsOf(ctx)
	s.matchPinned(pins, key, &opts)
	body, info, header, err := minio.Core{Client: s.client}.GetObject(traceFirstByte(ctx), s.bucket, s.prefix+key, opts)
	if err != nil {
		if err := s.changed(pins, key, err); err != nil {
			return 0, false, err
		}
		var resp minio.ErrorResponse
		if errors.As(err, &resp) && resp.Code == "InvalidRange" {
			// No byte at offset 0: the object is empty. It is confirmed
			// by its size, in case it was replaced between the two.
			size, err := s.Stat(ctx, key)
			if err != nil {
				return 0, false, err
			}
			if size != 0 {
				return 0, false, &Error{Store: s.name, Op: "read", Key: key, Err: fmt.Errorf("%w: the object was replaced while it was read (empty, then %d bytes): read it again", ErrUnavailable, size)}
			}
			into(0)
			return 0, true, nil
		}
		return 0, false, s.convert("read", key, err)
	}
	defer body.Close()
	if err := pins.see(s.name, key, info.ETag); err != nil {
		return 0, false, &Error{Store: s.name, Op: "read", Key: key, Err: err}
	}
	size := info.Size // a store that ignores the range sends it all
	if cr := header.Get("Content-Range"); cr != "" {
		if size, err = rangeTotal(cr); err != nil {
			return 0, false, &Error{Store: s.name, Op: "read", Key: key, Err: fmt.Errorf("%w: %v", ErrUnavailable, err)}
		}
	}
	if size < 0 {
		return 0, false, &Error{Store: s.name, Op: "read", Key: key, Err: fmt.Errorf("%w: the store gave no Content-Length", ErrUnavailable)}
	}
	p := into(min(size, max))
	n, err := io.ReadFull(body, p)
	if err != nil {
		if n > 0 && errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) && len(p) > 0 {
			return 0, false, &Error{Store: s.name, Op: "read", Key: key, Err: shortRead(n, len(p), 0)}
		}
		return 0, false, s.convert("read", key, err)
	}
	return size, size <= max, nil
}

// rangeTotal is the object's size a Content-Range header ends with
// ("bytes 0-65535/8388608").
func rangeTotal(cr string) (int64, error) {
	_, total, ok := strings.Cut(cr, "/")
	if !ok || !strings.HasPrefix(cr, "bytes ") {
		return 0, fmt.Errorf("the store's Content-Range %q is not a byte range", cr)
	}
	size, err := strconv.ParseInt(total, 10, 64)
	if err != nil || size < 0 {
		return 0, fmt.Errorf("the store's Content-Range %q gives no object size", cr)
	}
	return size, nil
}

func (s *S3) ReadAt(ctx context.Context, key string, p []byte, off int64) error {
	return s.ReadAtV(ctx, key, [][]byte{p}, off)
}

// ReadAtV is one ranged GET whose body fills bufs in turn.
func (s *S3) ReadAtV(ctx context.Context, key string, bufs [][]byte, off int64) error {
	if err := CheckKey(key); err != nil {
		return &Error{Store: s.name, Op: "read", Err: err}
	}
	want := VecLen(bufs)
	if want == 0 {
		size, err := s.Stat(ctx, key)
		if err == nil && off > size {
			err = &Error{Store: s.name, Op: "read", Key: key, Err: ErrShortRead}
		}
		return err
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, off+int64(want)-1); err != nil {
		return &Error{Store: s.name, Op: "read", Key: key, Err: err}
	}
	// Core's GET is one request whose body is read here, straight from the
	// connection. Client.GetObject puts a goroutine behind the body and
	// hands every Read to it over channels: two goroutine switches per
	// socket read, which a profile of global order (a GET per sample)
	// showed as most of the daemon's GET cost (issue 57).
	pins := pinsOf(ctx)
	s.matchPinned(pins, key, &opts)
	body, info, header, err := minio.Core{Client: s.client}.GetObject(traceFirstByte(ctx), s.bucket, s.prefix+key, opts)
	if err != nil {
		if err := s.changed(pins, key, err); err != nil {
			return err
		}
		return s.convert("read", key, err)
	}
	defer body.Close()
	if err := pins.see(s.name, key, info.ETag); err != nil {
		return &Error{Store: s.name, Op: "read", Key: key, Err: err}
	}
	// A store that ignores the range answers 200 with the whole object:
	// its first bytes are not the ones asked for.
	if cr := header.Get("Content-Range"); !strings.HasPrefix(cr, fmt.Sprintf("bytes %d-", off)) {
		return &Error{Store: s.name, Op: "read", Key: key, Err: fmt.Errorf("%w: asked for the bytes from %d, got Content-Range %q: the store does not serve ranged GETs", ErrUnavailable, off, cr)}
	}
	n, err := readFullV(body, bufs)
	if err == nil {
		return nil
	}
	if n > 0 && errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{Store: s.name, Op: "read", Key: key, Err: shortRead(n, want, off)}
	}
	return s.convert("read", key, err)
}

func (s *S3) Put(ctx context.Context, key string, data []byte) error {
	if err := CheckKey(key); err != nil {
		return &Error{Store: s.name, Op: "write", Err: err}
	}
	opts := s.putOptions(data, len(data) < 512<<20)
	pins := pinsOf(ctx)
	was := pins.pinned(s.name, key)
	if was != "" {
		opts.SetMatchETag(was) // replace that version only
	}
	info, err := s.client.PutObject(ctx, s.bucket, s.prefix+key, bytes.NewReader(data), int64(len(data)), opts)
	var resp minio.ErrorResponse
	if err != nil && was != "" && errors.As(err, &resp) {
		switch {
		case resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed" || resp.Code == "NoSuchKey":
			return &Error{Store: s.name, Op: "write", Key: key, Err: fmt.Errorf("%w (its ETag is no longer %s)", ErrChanged, was)}
		case resp.StatusCode == http.StatusNotImplemented || resp.Code == "NotImplemented":
			// A store that does no conditional PUT: the write replaces
			// whatever is there, as the check then the write did before.
			info, err = s.client.PutObject(ctx, s.bucket, s.prefix+key, bytes.NewReader(data), int64(len(data)), s.putOptions(data, len(data) < 512<<20))
		}
	}
	if err == nil && was != "" {
		pins.replaced(s.name, key, info.ETag)
	}
	return s.convert("write", key, err)
}

func (s *S3) Create(ctx context.Context, key string, data []byte) error {
	if err := CheckKey(key); err != nil {
		return &Error{Store: s.name, Op: "create", Err: err}
	}
	opts := s.putOptions(data, true)
	opts.SetMatchETagExcept("*") // If-None-Match: *
	_, err := s.client.PutObject(ctx, s.bucket, s.prefix+key, bytes.NewReader(data), int64(len(data)), opts)
	return s.convert("create", key, err)
}

func (s *S3) Stat(ctx context.Context, key string) (int64, error) {
	if err := CheckKey(key); err != nil {
		return 0, &Error{Store: s.name, Op: "stat", Err: err}
	}
	pins := pinsOf(ctx)
	var opts minio.StatObjectOptions
	if v := pins.pinned(s.name, key); v != "" {
		opts.SetMatchETag(v)
	}
	info, err := s.client.StatObject(ctx, s.bucket, s.prefix+key, opts)
	if err != nil {
		if err := s.changed(pins, key, err); err != nil {
			return 0, err
		}
		return 0, s.convert("stat", key, err)
	}
	if err := pins.see(s.name, key, info.ETag); err != nil {
		return 0, &Error{Store: s.name, Op: "stat", Key: key, Err: err}
	}
	return info.Size, nil
}

// matchPinned asks a GET under a Versions' Pin for the pinned version of key
// only (If-Match: its ETag).
func (s *S3) matchPinned(pins *Versions, key string, opts *minio.GetObjectOptions) {
	if v := pins.pinned(s.name, key); v != "" {
		opts.SetMatchETag(v)
	}
}

// changed is ErrChanged when err is the store's refusal of a request that
// asked for key's pinned version (412 Precondition Failed), else nil.
func (s *S3) changed(pins *Versions, key string, err error) error {
	var resp minio.ErrorResponse
	if pins.pinned(s.name, key) == "" || !errors.As(err, &resp) || resp.StatusCode != http.StatusPreconditionFailed && resp.Code != "PreconditionFailed" {
		return nil
	}
	return &Error{Store: s.name, Op: "read", Key: key, Err: fmt.Errorf("%w (its ETag is no longer %s)", ErrChanged, pins.pinned(s.name, key))}
}

func (s *S3) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, s.convert("list", prefix, obj.Err)
		}
		keys = append(keys, strings.TrimPrefix(obj.Key, s.prefix))
	}
	sort.Strings(keys)
	return keys, nil
}

func (s *S3) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return &Error{Store: s.name, Op: "delete", Err: err}
	}
	return s.convert("delete", key, s.client.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{}))
}

// putOptions are a PUT's options. The payload goes unsigned
// (UNSIGNED-PAYLOAD), with its CRC32C in the x-amz-checksum-crc32c
// header, which the store checks before it stores the object (MinIO does,
// and AWS S3): a payload damaged on the way is refused, as a signed one
// is. Over plain HTTP,
// minio-go would otherwise sign the payload in chunks
// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD): a SHA-256 over every byte written,
// here and again in the store, 6.7% of an ingest's CPU samples here, and
// about 5% of the ingest's and MinIO's CPU together (issue 59's
// ingestcpu source, 5 runs each, alternated). The header form needs
// minio-go's TrailingHeaders (NewS3) only to pass its check; with a
// checksum given, minio-go adds no trailer, so the request is a plain
// PUT. What a store holds is checked against shardfs's own checksums on
// every read either way.
//
// Google Cloud Storage takes no checksum header (minio-go refuses one):
// there the payload goes signed, as before.
func (s *S3) putOptions(data []byte, single bool) minio.PutObjectOptions {
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: single}
	if s.google {
		return opts
	}
	opts.DisableContentSha256 = true
	if !single {
		return opts // minio-go checks each part of a multipart upload by its CRC32C
	}
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], verify.Sum(data)) // CRC32C, as the header names
	opts.UserMetadata = map[string]string{"x-amz-checksum-crc32c": base64.StdEncoding.EncodeToString(sum[:])}
	return opts
}

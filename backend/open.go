package backend

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// OpenOptions configure Open.
type OpenOptions struct {
	// Credentials for S3 stores; nil means the AWS environment and shared file.
	Credentials *Credentials
	// MaxRetries per S3 request (default 1: erasure coding absorbs failures).
	MaxRetries int
}

// Open returns the store for a URL:
//
//	file:///abs/dir                  a local directory
//	s3://BUCKET[/PREFIX]             endpoint from AWS_ENDPOINT_URL (default s3.amazonaws.com)
//	http(s)://HOST:PORT/BUCKET[/PREFIX]  an explicit path-style endpoint, as MinIO is addressed
//	minio://HOST:PORT/BUCKET[/PREFIX]    the same as http://
//
// Credentials in the URL are refused, so they can never leak into argv or logs.
func Open(raw string, opts OpenOptions) (Store, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the whole URL, secret included: keep only its cause.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("store URL %q: %v: use file:///dir, s3://bucket/prefix or http://host:port/bucket/prefix", redactURL(raw), err)
	}
	if u.User != nil {
		return nil, fmt.Errorf("store URL %s: credentials in URLs are refused: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or use the config file", redactURL(raw))
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("store URL %s: file URLs need an absolute path, as in file:///data/store0", redactURL(raw))
		}
		if u.Path == "" {
			return nil, fmt.Errorf("store URL %s: missing directory, as in file:///data/store0", redactURL(raw))
		}
		return NewLocal(u.Path)
	case "s3":
		endpoint, secure := "s3.amazonaws.com", true
		if ep := os.Getenv("AWS_ENDPOINT_URL"); ep != "" {
			eu, err := url.Parse(ep)
			if err != nil || eu.Host == "" {
				return nil, fmt.Errorf("AWS_ENDPOINT_URL %q is not a URL like http://127.0.0.1:9000", ep)
			}
			endpoint, secure = eu.Host, eu.Scheme == "https"
		}
		if u.Host == "" {
			return nil, fmt.Errorf("store URL %s: missing bucket, as in s3://bucket/prefix", raw)
		}
		return NewS3(S3Config{Endpoint: endpoint, Secure: secure, Bucket: u.Host, Prefix: u.Path,
			Credentials: opts.Credentials, MaxRetries: opts.MaxRetries, Region: os.Getenv("AWS_REGION")})
	case "http", "https", "minio":
		if u.Host == "" {
			return nil, fmt.Errorf("store URL %s: missing host:port, as in http://127.0.0.1:9000/bucket", raw)
		}
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
		if bucket == "" {
			return nil, fmt.Errorf("store URL %s: missing bucket, as in http://%s/bucket/prefix", raw, u.Host)
		}
		return NewS3(S3Config{Endpoint: u.Host, Secure: u.Scheme == "https", Bucket: bucket, Prefix: prefix,
			Credentials: opts.Credentials, MaxRetries: opts.MaxRetries, Region: os.Getenv("AWS_REGION")})
	default:
		return nil, fmt.Errorf("store URL %s: unknown scheme %q: use file://, s3://, http(s):// or minio://", redactURL(raw), u.Scheme)
	}
}

// redactURL drops anything that may be userinfo, so a mistyped URL with a
// secret is never echoed: everything between the scheme (if any) and the
// last '@' before the path goes, whatever the URL's other mistakes.
func redactURL(raw string) string {
	start := 0
	if j := strings.Index(raw, "://"); j >= 0 {
		start = j + 3
	}
	end := len(raw)
	if k := strings.IndexAny(raw[start:], "/?#"); k >= 0 {
		end = start + k
	}
	if i := strings.LastIndex(raw[start:end], "@"); i >= 0 {
		return raw[:start] + "REDACTED@" + raw[start+i+1:]
	}
	if start == 0 {
		// No scheme: "key:secret@host" parses as a scheme; a colon anywhere may hide a secret.
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			return "REDACTED@" + raw[i+1:]
		}
	}
	return raw
}

// Ping checks that a store is reachable, the bucket exists and the
// credentials are accepted, with one cheap list call.
func Ping(ctx context.Context, s Store) error {
	_, err := s.List(ctx, ".shardfs-ping/")
	var e *Error
	if errors.As(err, &e) {
		return &Error{Store: e.Store, Op: "check access", Err: e.Err}
	}
	return err
}

package s3gw

import (
	"encoding/xml"
	"net/http"
	"net/url"
	"strings"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
)

// CopyObject (PUT with x-amz-copy-source) copies through the gateway: it
// reads the source with the SDK and writes the destination as a PUT of the
// same bytes, streaming, a read window at a time, so memory stays bounded
// as for a PUT. The copy is a new object: a fresh ETag (the MD5 of the
// body up to 64 MiB, as S3's), a new Last-Modified.

type copyObjectResult struct {
	XMLName      xml.Name `xml:"CopyObjectResult"`
	XMLNS        string   `xml:"xmlns,attr"`
	LastModified string
	ETag         string
}

// parseCopySource splits x-amz-copy-source, "[/]BUCKET/KEY" URL-encoded,
// optionally with "?versionId=null" (the only version there is).
func parseCopySource(v string) (bucket, key string, err error) {
	path, query, _ := strings.Cut(v, "?")
	if query != "" {
		q, perr := url.ParseQuery(query)
		if perr != nil || len(q) != 1 || q.Get("versionId") == "" {
			return "", "", errf(ErrInvalidArgument, "x-amz-copy-source %q: only ?versionId may follow the key", v)
		}
		if q.Get("versionId") != "null" {
			return "", "", errf(ErrNotImplemented, "versioning is not implemented: no version %q", q.Get("versionId"))
		}
	}
	path, err = url.PathUnescape(path)
	if err != nil {
		return "", "", errf(ErrInvalidArgument, "x-amz-copy-source %q: %v", v, err)
	}
	bucket, key, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !ok || bucket == "" || key == "" {
		return "", "", errf(ErrInvalidArgument, "x-amz-copy-source %q: want BUCKET/KEY", v)
	}
	if err := ops.CheckBucketName(bucket); err != nil {
		return "", "", errf(ErrInvalidArgument, "x-amz-copy-source %q: %v", v, err)
	}
	if err := ops.CheckKey(key); err != nil {
		return "", "", errf(ErrInvalidArgument, "x-amz-copy-source %q: %v", v, err)
	}
	return bucket, key, nil
}

func (g *Gateway) copyObject(req *request) error {
	r := req.r
	srcBucket, srcKey, err := parseCopySource(r.Header.Get("X-Amz-Copy-Source"))
	if err != nil {
		return err
	}
	directive := strings.ToUpper(r.Header.Get("X-Amz-Metadata-Directive"))
	switch directive {
	case "", "COPY", "REPLACE":
	default:
		return errf(ErrInvalidArgument, "unknown metadata directive %q: want COPY or REPLACE", directive)
	}
	if srcBucket == req.bucket && srcKey == req.key && directive != "REPLACE" {
		return errf(ErrInvalidRequest, "this copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes")
	}
	src, err := g.cl.GetObject(r.Context(), srcBucket, srcKey, client.GetOptions{})
	if err != nil {
		return err
	}
	defer src.Close()
	info, _ := src.Stat()
	// x-amz-copy-source-if-*: any condition that does not hold fails the
	// copy (412), a not-modified one included, as S3 does.
	if evalConditions(r.Header, "X-Amz-Copy-Source-", info) != condPass {
		return errf(ErrPreconditionFailed, "at least one of the pre-conditions you specified did not hold")
	}
	if info.Size > maxObjectSize {
		return errf(ErrInvalidRequest, "the source of a copy may be at most 5 GiB (use UploadPartCopy)")
	}
	contentType, meta := info.ContentType, info.UserMetadata
	if directive == "REPLACE" {
		if meta, err = objectMetadata(r.Header); err != nil {
			return err
		}
		contentType = r.Header.Get("Content-Type")
	}
	out, err := g.cl.PutObject(r.Context(), req.bucket, req.key, src, info.Size, g.putOptions(contentType, meta, info.Size))
	if err != nil {
		return err
	}
	writeXML(req.w, http.StatusOK, copyObjectResult{XMLNS: s3XMLNS, LastModified: s3Time(out.LastModified), ETag: quoteETag(out.ETag)})
	return nil
}

package s3gw

import (
	"cmp"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"golang.org/x/net/http/httpguts"
)

const (
	// maxSinglePut is the largest body the SDK puts in one op (its
	// PutOptions.PartSize bound); a larger PUT goes in pieces.
	maxSinglePut = 64 << 20
	// maxObjectSize is S3's largest single PUT, and largest part.
	maxObjectSize = 5 << 30
	// maxUserMeta is S3's bound on the user metadata of an object.
	maxUserMeta = 2 << 10
)

const metaPrefix = "X-Amz-Meta-"

// objectMetadata collects a PUT's user metadata and stored headers.
func objectMetadata(h http.Header) (map[string]string, error) {
	meta := map[string]string{}
	size := 0
	for name, vals := range h {
		if k, ok := strings.CutPrefix(name, metaPrefix); ok && k != "" {
			k = strings.ToLower(k)
			meta[k] = strings.Join(vals, ",")
			size += len(k) + len(meta[k])
		}
	}
	if size > maxUserMeta {
		return nil, errf(ErrMetadataTooLarge, "your metadata headers exceed the maximum allowed metadata size of %d bytes", maxUserMeta)
	}
	for _, name := range ops.StoredHeaders {
		if v := h.Get(name); v != "" {
			meta[ops.StoredHeaderKey(name)] = v
		}
	}
	return meta, nil
}

func (g *Gateway) putObject(req *request) error {
	r := req.r
	if r.ContentLength < 0 {
		return errf(ErrMissingContentLength, "you must provide the Content-Length HTTP header")
	}
	if r.ContentLength > maxObjectSize {
		return errf(ErrEntityTooLarge, "your proposed upload exceeds the maximum allowed size of 5 GiB")
	}
	meta, err := objectMetadata(r.Header)
	if err != nil {
		return err
	}
	opts, err := g.putOptions(r.Header, r.Header.Get("Content-Type"), meta, r.ContentLength)
	if err != nil {
		return err
	}
	if err := g.bucketBeforeContinue(req); err != nil {
		return err
	}
	info, err := g.cl.PutObject(r.Context(), req.bucket, req.key, r.Body, r.ContentLength, opts)
	if err != nil {
		return err
	}
	req.w.Header().Set("ETag", quoteETag(info.ETag))
	echoed := echoChecksum(req)
	if !echoed && strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Amz-Checksum-Algorithm")), "crc32c") {
		// Asked for by name without a value (minio-go's automatic
		// checksums over HTTP): S3 computes it; Osprey has it.
		req.w.Header()[checksumHeaders["crc32c"]] = []string{crc32cBase64(info.CRC32C)}
		echoed = true
	}
	if echoed {
		// A single put's checksum is of the whole object.
		req.w.Header().Set("X-Amz-Checksum-Type", "FULL_OBJECT")
	}
	req.w.WriteHeader(http.StatusOK)
	return nil
}

// echoChecksum answers a body's x-amz-checksum-* with itself, as S3 does:
// the body was checked against it already, whether it came as a header or
// in an aws-chunked body's trailer. It reports whether there was one.
func echoChecksum(req *request) bool {
	h, echoed := req.w.Header(), false
	for _, name := range checksumHeaders {
		if v := cmp.Or(headerOf(req.r.Header, name), headerOf(req.r.Trailer, name)); v != "" {
			h[name] = []string{v}
			echoed = true
		}
	}
	return echoed
}

// bucketBeforeContinue checks that a write's bucket is there when its
// client waits for 100 Continue before sending the body (which net/http
// sends at the body's first read): a missing bucket is answered 404 at
// once, as S3 does, not once the whole body came. Other writes learn it
// from the write, without a round trip more.
func (g *Gateway) bucketBeforeContinue(req *request) error {
	r := req.r
	if r.ContentLength == 0 || !expectsContinue(r) {
		return nil
	}
	_, err := g.cl.StatBucket(r.Context(), req.bucket)
	return err
}

// expectsContinue reports whether r's client waits for 100 Continue.
func expectsContinue(r *http.Request) bool {
	return strings.Contains(strings.ToLower(r.Header.Get("Expect")), "100-continue")
}

// putOptions are the SDK's options for a PUT (or copy) of size bytes
// with request headers h: one op up to maxSinglePut; above, pieces of
// PartSize, Concurrency in flight, kept one part (WholeETag), so that its
// ETag is the MD5 of the body, as S3's for any single PUT, and it has no
// parts (a GET of partNumber=1 is all of it). The write's conditions come
// from h (writeConditions).
func (g *Gateway) putOptions(h http.Header, contentType string, meta map[string]string, size int64) (client.PutOptions, error) {
	ifMatch, ifNoneMatch, err := writeConditions(h)
	if err != nil {
		return client.PutOptions{}, err
	}
	opts := client.PutOptions{ContentType: contentType, UserMetadata: meta, PartSize: g.opts.PartSize, Concurrency: g.opts.Concurrency,
		WholeETag: true, IfMatch: ifMatch, IfNoneMatch: ifNoneMatch}
	if size <= maxSinglePut {
		opts.PartSize = maxSinglePut
	}
	return opts, nil
}

// quoteETag is an ETag as S3 sends it, in double quotes.
func quoteETag(etag string) string { return `"` + strings.Trim(etag, `"`) + `"` }

func appendQuotedETag(b []byte, etag string) []byte {
	b = append(b, '"')
	b = append(b, strings.Trim(etag, `"`)...)
	return append(b, '"')
}

// objectHeaders sets the headers that describe an object, and the
// Content-Length of a response of length bytes of it.
func objectHeaders(h http.Header, info client.ObjectInfo, length int64) {
	ct := cmp.Or(info.ContentType, "binary/octet-stream")
	// Canonical keys, the values in one array, and the ETag, Last-Modified
	// and Content-Length made in one string: Set would canonicalize each
	// key and allocate each value's slice, and each value would be a
	// string of its own.
	var buf [128]byte
	b := appendQuotedETag(buf[:0], info.ETag)
	etag := len(b)
	b = info.LastModified.UTC().AppendFormat(b, http.TimeFormat)
	lm := len(b)
	s := string(strconv.AppendInt(b, length, 10))
	v := &[5]string{ct, s[:etag], s[etag:lm], "bytes", s[lm:]}
	h["Content-Type"], h["Etag"], h["Last-Modified"], h["Accept-Ranges"], h["Content-Length"] = v[0:1:1], v[1:2:2], v[2:3:3], v[3:4:4], v[4:5:5]
	for k, v := range info.UserMetadata {
		if std, ok := ops.StoredHeaderOf(k); ok {
			h.Set(std, v)
			continue
		}
		if strings.HasPrefix(k, ":") || !httpguts.ValidHeaderFieldName(k) {
			// Written by a client that does not check (the SDK refuses
			// such a key): never a header of ours, never a broken one.
			continue
		}
		h["X-Amz-Meta-"+k] = []string{v}
	}
}

// responseOverrides are the query parameters of a GET that replace a
// response header, as S3's response-content-type and friends.
var responseOverrides = map[string]string{
	"response-content-type":        "Content-Type",
	"response-content-language":    "Content-Language",
	"response-expires":             "Expires",
	"response-cache-control":       "Cache-Control",
	"response-content-disposition": "Content-Disposition",
	"response-content-encoding":    "Content-Encoding",
}

func (g *Gateway) getObjectBody(req *request) error { return g.getObject(req, false) }

func (g *Gateway) headObject(req *request) error { return g.getObject(req, true) }

// ErrInvalidPartNumber: a GET or HEAD of a part the object does not have.
var ErrInvalidPartNumber = &Error{Code: "InvalidPartNumber", Status: http.StatusRequestedRangeNotSatisfiable}

// partSpan is the offset and length of part number n of an object: of a
// multipart object's part of that number, or, for an object put whole,
// all of it as its part 1, as S3 answers.
func partSpan(info client.ObjectInfo, n int) (off, size int64, ok bool) {
	if len(info.Parts) == 0 {
		return 0, info.Size, n == 1
	}
	for _, p := range info.Parts {
		if p.PartNumber == n {
			return off, p.Size, true
		}
		off += p.Size
	}
	return 0, 0, false
}

// getObject answers GET and HEAD of an object, whole, a Range of it or
// one partNumber, streaming the SDK's read windows to the connection.
func (g *Gateway) getObject(req *request, head bool) error {
	r := req.r
	ctx := r.Context()
	q := req.query()
	rng, ranged := parseRange(r.Header.Get("Range"))
	part := 0
	if q.Has("partNumber") {
		var err error
		if part, err = partNumber(q); err != nil {
			return err
		}
		if r.Header.Get("Range") != "" {
			return errf(ErrInvalidRequest, "cannot specify both Range header and partNumber query parameter")
		}
	}
	var (
		info client.ObjectInfo
		obj  *client.Object
		err  error
	)
	off, n := int64(0), int64(-1)
	switch {
	case head || part > 0 || ranged && rng.suffix > 0:
		// The size first: a HEAD needs nothing else, a suffix range
		// starts from it, a part's place is in it.
		if info, err = g.cl.StatObject(ctx, req.bucket, req.key); err != nil {
			return err
		}
		var ok bool
		switch {
		case part > 0:
			if off, n, ok = partSpan(info, part); !ok {
				return errf(ErrInvalidPartNumber, "the requested partnumber is not satisfiable")
			}
		case ranged:
			if off, n, ok = rng.resolve(info.Size); !ok {
				return unsatisfiable(req, info)
			}
		}
		if head {
			break
		}
		obj, err = g.cl.GetObject(ctx, req.bucket, req.key, client.GetOptions{Range: true, Offset: off, Length: n})
	case ranged:
		n, off = rng.length(), rng.first
		obj, err = g.cl.GetObject(ctx, req.bucket, req.key, client.GetOptions{Range: true, Offset: off, Length: n})
	default:
		obj, err = g.cl.GetObject(ctx, req.bucket, req.key, client.GetOptions{})
	}
	if errors.Is(err, client.ErrInvalidRange) {
		// Only now the stat, for the object's size and the conditions:
		// a plain ranged GET pays for none.
		st, serr := g.cl.StatObject(ctx, req.bucket, req.key)
		if serr != nil {
			return invalidRange(req, -1)
		}
		return unsatisfiable(req, st)
	}
	if err != nil {
		return err
	}
	if obj != nil {
		defer obj.Close()
		got, _ := obj.Stat()
		if head || part > 0 || ranged && rng.suffix > 0 {
			if got.ETag != info.ETag {
				// Overwritten between the stat and the get: the range
				// was of another object.
				return errf(ErrServiceUnavailable, "the object changed while being read; try again")
			}
		}
		info = got
	}
	if done, err := answerConditions(req, info); done {
		return err
	}
	switch {
	case part > 0:
		// off and n are the part's already.
	case ranged:
		var ok bool
		if off, n, ok = rng.resolve(info.Size); !ok {
			return invalidRange(req, info.Size)
		}
	default:
		off, n = 0, info.Size
	}
	h := req.w.Header()
	objectHeaders(h, info, n)
	for p, name := range responseOverrides {
		if v := q.Get(p); v != "" {
			h.Set(name, v)
		}
	}
	if !ranged && strings.EqualFold(r.Header.Get("X-Amz-Checksum-Mode"), "ENABLED") {
		switch i := slices.IndexFunc(info.Parts, func(p client.ObjectPart) bool { return p.PartNumber == part }); {
		case part == 0 || len(info.Parts) == 0:
			// The CRC32C of the whole object, which Osprey keeps for
			// every object (a multipart one's combined from its
			// parts'); an object put whole is its own part 1.
			h.Set("x-amz-checksum-crc32c", crc32cBase64(info.CRC32C))
			h.Set("x-amz-checksum-type", "FULL_OBJECT")
		case i >= 0:
			// One part's: the SDK checks the part's bytes against it.
			h.Set("x-amz-checksum-crc32c", crc32cBase64(info.Parts[i].CRC32C))
		}
	}
	if part > 0 && len(info.Parts) > 0 {
		h.Set("x-amz-mp-parts-count", strconv.Itoa(len(info.Parts)))
	}
	status := http.StatusOK
	if ranged || part > 0 && n > 0 {
		status = http.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, info.Size))
	}
	req.w.WriteHeader(status)
	if head {
		return nil
	}
	if _, err := io.Copy(req.w, obj); err != nil {
		return err
	}
	return nil
}

// answerConditions evaluates a GET or HEAD's conditions against info
// and, unless they pass, answers it: 412 PreconditionFailed (the error
// returned) or 304 Not Modified. done is true when it answered.
func answerConditions(req *request, info client.ObjectInfo) (done bool, err error) {
	switch evalConditions(req.r.Header, "", info) {
	case condFailed:
		return true, errf(ErrPreconditionFailed, "at least one of the preconditions you specified did not hold")
	case condNotModified:
		h := req.w.Header()
		h.Set("ETag", quoteETag(info.ETag))
		h.Set("Last-Modified", info.LastModified.UTC().Format(http.TimeFormat))
		req.w.WriteHeader(http.StatusNotModified)
		return true, nil
	}
	return false, nil
}

// unsatisfiable answers a GET or HEAD whose range no byte of the object
// info satisfies: its conditions come first (RFC 9110 13.2.2, as S3
// does), so a failed one is 412 and a not-modified one 304, else 416.
func unsatisfiable(req *request, info client.ObjectInfo) error {
	if done, err := answerConditions(req, info); done {
		return err
	}
	return invalidRange(req, info.Size)
}

func invalidRange(req *request, size int64) error {
	if size >= 0 {
		req.w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
	}
	return errf(ErrInvalidRange, "the requested range is not satisfiable")
}

func (g *Gateway) deleteObject(req *request) error {
	ifMatch, err := deleteConditions(req.r.Header)
	if err != nil {
		return err
	}
	if err := g.remove(req.r.Context(), req.bucket, req.key, ifMatch); err != nil {
		return err
	}
	req.w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteRequest is DeleteObjects' body.
type deleteRequest struct {
	XMLName xml.Name `xml:"Delete"`
	Quiet   bool
	Objects []struct {
		Key       string
		VersionID string `xml:"VersionId"`
		// ETag makes the object's delete conditional, as If-Match does
		// a DELETE's; LastModifiedTime and Size, which S3 checks on
		// directory buckets only, are refused (deleteConditions).
		ETag             string
		LastModifiedTime string
		Size             string
	} `xml:"Object"`
}

type deletedEntry struct {
	Key       xmlText
	VersionID string `xml:"VersionId,omitempty"` // as the request named it (null), as S3 echoes it
}

type deleteError struct {
	Key     xmlText
	Code    string
	Message xmlText
}

type deleteResult struct {
	XMLName xml.Name `xml:"DeleteResult"`
	XMLNS   string   `xml:"xmlns,attr"`
	Deleted []deletedEntry
	Errors  []deleteError `xml:"Error"`
}

// maxDeleteKeys is S3's bound on one DeleteObjects.
const maxDeleteKeys = 1000

// parseDeleteRequest parses and checks DeleteObjects' XML.
func parseDeleteRequest(b []byte) (deleteRequest, error) {
	var d deleteRequest
	if err := xml.Unmarshal(b, &d); err != nil {
		return d, errf(ErrMalformedXML, "the XML you provided was not well-formed: %v", err)
	}
	if len(d.Objects) == 0 || len(d.Objects) > maxDeleteKeys {
		return d, errf(ErrMalformedXML, "a Delete names 1 to %d objects, not %d", maxDeleteKeys, len(d.Objects))
	}
	for i, o := range d.Objects {
		if o.Key == "" {
			// S3 refuses the whole request, as a document that does not
			// follow its schema: an Object must have a Key.
			return d, errf(ErrMalformedXML, "object %d of the Delete has no Key", i+1)
		}
	}
	return d, nil
}

func (g *Gateway) deleteObjects(req *request) error {
	ctx := req.r.Context()
	// S3 refuses each key of a caller that may not delete it (200, an
	// AccessDenied per key: aws s3 rm --recursive reports them so); one
	// that may not even read the bucket was refused whole (route).
	denied := req.authorize(write, req.bucket)
	b, err := readSmall(req.r.Body, req.r.ContentLength, maxXMLBody)
	if err != nil {
		return err
	}
	d, err := parseDeleteRequest(b)
	if err != nil {
		return err
	}
	if _, err := g.cl.StatBucket(ctx, req.bucket); err != nil {
		return err
	}
	errs := make([]error, len(d.Objects))
	ops.Parallel(len(d.Objects), 16, func(i int) {
		o := &d.Objects[i]
		if errs[i] = denied; errs[i] != nil {
			return
		}
		if errs[i] = oneVersion(o.VersionID); errs[i] != nil {
			return
		}
		if o.LastModifiedTime != "" || o.Size != "" {
			errs[i] = errf(ErrNotImplemented, "conditional deletes on LastModifiedTime and Size are not implemented (S3 has them on directory buckets only)")
			return
		}
		errs[i] = g.remove(ctx, req.bucket, o.Key, o.ETag)
	})
	res := deleteResult{XMLNS: s3XMLNS}
	for i, o := range d.Objects {
		if errs[i] != nil {
			e := toS3Error(errs[i])
			res.Errors = append(res.Errors, deleteError{Key: xmlText(o.Key), Code: e.Code, Message: xmlText(e.Message)})
		} else if !d.Quiet {
			res.Deleted = append(res.Deleted, deletedEntry{Key: xmlText(o.Key), VersionID: o.VersionID})
		}
	}
	writeXML(req.w, http.StatusOK, res)
	return nil
}

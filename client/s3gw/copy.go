package s3gw

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/xml"
	"errors"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
)

// CopyObject (PUT with x-amz-copy-source) copies through the gateway: it
// reads the source with the SDK and writes the destination as a PUT of the
// same bytes, streaming, a read window at a time, so memory stays bounded
// as for a PUT. The copy is a new object: a fresh ETag (the MD5 of the
// body, as S3's), a new Last-Modified.

type copyObjectResult struct {
	XMLName      xml.Name `xml:"CopyObjectResult"`
	XMLNS        string   `xml:"xmlns,attr"`
	LastModified string
	ETag         string
	// The checksum x-amz-checksum-algorithm asked for, of the copy.
	ChecksumCRC32     string `xml:",omitempty"`
	ChecksumCRC32C    string `xml:",omitempty"`
	ChecksumCRC64NVME string `xml:",omitempty"`
	ChecksumSHA1      string `xml:",omitempty"`
	ChecksumSHA256    string `xml:",omitempty"`
	ChecksumType      string `xml:",omitempty"`
}

// setChecksum sets the result's checksum of algorithm alg (as
// checksumAlgorithms names them) to sum.
func (c *copyObjectResult) setChecksum(alg string, sum []byte) {
	v := base64.StdEncoding.EncodeToString(sum)
	switch alg {
	case "crc32":
		c.ChecksumCRC32 = v
	case "crc32c":
		c.ChecksumCRC32C = v
	case "crc64nvme":
		c.ChecksumCRC64NVME = v
	case "sha1":
		c.ChecksumSHA1 = v
	case "sha256":
		c.ChecksumSHA256 = v
	}
	c.ChecksumType = "FULL_OBJECT"
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
		if err := oneVersion(q.Get("versionId")); err != nil {
			return "", "", err
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

// openCopySource opens the object x-amz-copy-source names, the range
// opts select of it, and checks the x-amz-copy-source-if-* conditions
// against it: any that does not hold fails the copy (412), a not-modified
// one included, as S3 does. The caller closes the object.
func (g *Gateway) openCopySource(req *request, opts client.GetOptions) (*client.Object, client.ObjectInfo, error) {
	srcBucket, srcKey, err := parseCopySource(req.r.Header.Get("X-Amz-Copy-Source"))
	if err != nil {
		return nil, client.ObjectInfo{}, err
	}
	if err := req.authorize(read, srcBucket); err != nil {
		return nil, client.ObjectInfo{}, err
	}
	src, err := g.cl.GetObject(req.r.Context(), srcBucket, srcKey, opts)
	if err != nil {
		if e := *toS3Error(err); e.Code == "NoSuchKey" || e.Code == "NoSuchBucket" {
			// The error document names the source, not the request's
			// bucket and key.
			e.Bucket, e.Key = srcBucket, srcKey
			return nil, client.ObjectInfo{}, &e
		}
		return nil, client.ObjectInfo{}, err
	}
	info, _ := src.Stat()
	if evalConditions(req.r.Header, "X-Amz-Copy-Source-", info) != condPass {
		src.Close()
		return nil, client.ObjectInfo{}, errf(ErrPreconditionFailed, "at least one of the pre-conditions you specified did not hold")
	}
	return src, info, nil
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
	src, info, err := g.openCopySource(req, client.GetOptions{})
	if err != nil {
		return err
	}
	defer src.Close()
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
	// If-Match and If-None-Match (not x-amz-copy-source-if-*) are the
	// destination's conditions, checked by the OSD as the copy is written.
	opts, err := g.putOptions(r.Header, contentType, meta, info.Size)
	if err != nil {
		return err
	}
	// x-amz-checksum-algorithm: S3 answers the copy's checksum of it.
	// CRC32C is the store's own; another is computed as the bytes pass
	// (unknownChecksums refused the rest).
	alg := strings.ToLower(strings.TrimSpace(r.Header.Get("X-Amz-Checksum-Algorithm")))
	var body io.Reader = src
	var sum hash.Hash
	if mk := checksumAlgorithms[alg]; mk != nil && alg != "crc32c" {
		sum = mk()
		body = io.TeeReader(src, sum)
	}
	return g.answerLong(req, func() (any, error) {
		out, err := g.cl.PutObject(r.Context(), req.bucket, req.key, body, info.Size, opts)
		if err != nil {
			return nil, err
		}
		res := copyObjectResult{XMLNS: s3XMLNS, LastModified: s3Time(out.LastModified), ETag: quoteETag(out.ETag)}
		switch {
		case sum != nil:
			res.setChecksum(alg, sum.Sum(nil))
		case alg == "crc32c":
			res.setChecksum(alg, binary.BigEndian.AppendUint32(nil, out.CRC32C))
		}
		return res, nil
	})
}

// A copy still running copyKeepAliveAfter after it began has its 200 sent
// then and a space every copyKeepAliveEvery after (answerLong); 0 sends the
// 200 before the copy starts. Variables: tests set them.
var (
	copyKeepAliveAfter = 2 * time.Second
	copyKeepAliveEvery = 5 * time.Second
)

// answerLong runs a copy and answers with what it returns: as XML if it
// ends within copyKeepAliveAfter; else, as AWS does, the 200 and the XML
// declaration go out then, and a space every copyKeepAliveEvery, so that a
// client's read timeout (60 s in boto3 and the AWS CLI, 50 s in the Java
// SDK v1) and the proxies between see bytes while gigabytes are copied,
// and the copy's result, or its Error document, ends the body. The SDKs
// read an Error in the 200 of a CopyObject or UploadPartCopy as the
// failure it is (AWS documents this answer for both).
func (g *Gateway) answerLong(req *request, run func() (any, error)) error {
	stop, stopped := make(chan struct{}), make(chan struct{})
	begun := false // the 200 is out; read by this goroutine once stopped is closed
	tick := func() {
		if !begun {
			req.w.Header().Set("Content-Type", "application/xml")
			req.w.WriteHeader(http.StatusOK)
			io.WriteString(req.w, xml.Header)
			begun = true
		} else {
			io.WriteString(req.w, " ")
		}
		http.NewResponseController(req.w).Flush()
	}
	wait := copyKeepAliveAfter
	if wait <= 0 {
		tick()
		wait = copyKeepAliveEvery
	}
	go func() {
		defer close(stopped)
		t := time.NewTimer(wait)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			tick()
			t.Reset(copyKeepAliveEvery)
		}
	}()
	var once sync.Once
	end := func() {
		once.Do(func() {
			close(stop)
			<-stopped
		})
	}
	defer end() // a panic in run (net/http recovers it) must not leave the spaces going
	v, err := run()
	end()
	if !begun {
		if err != nil {
			return err
		}
		writeXML(req.w, http.StatusOK, v)
		return nil
	}
	if err != nil {
		e := toS3Error(g.uploadOrBucket(req, err))
		g.noteFailure(req, e, err)
		req.lateErr = e
		v = errorDoc(req, e)
	}
	b, merr := xml.Marshal(v)
	if merr != nil {
		b = []byte("<Error><Code>InternalError</Code></Error>")
	}
	req.w.Write(unmarkXMLText(b))
	return nil
}

type copyPartResult struct {
	XMLName      xml.Name `xml:"CopyPartResult"`
	XMLNS        string   `xml:"xmlns,attr"`
	LastModified string
	ETag         string
}

// parseCopySourceRange reads x-amz-copy-source-range, which unlike Range
// must be "bytes=first-last" with both ends.
func parseCopySourceRange(v string) (byteRange, error) {
	rng, ok := parseRange(v)
	if !ok || rng.suffix > 0 || rng.none || rng.last < 0 {
		return rng, errf(ErrInvalidArgument, "the x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy")
	}
	return rng, nil
}

// copyRangeInvalid is S3's answer to an x-amz-copy-source-range not within
// the source: 400 InvalidArgument, in AWS's words (a GET's range past the
// end is 416 InvalidRange instead). size < 0: not known here.
func copyRangeInvalid(r *http.Request, size int64) error {
	rng := r.Header.Get("X-Amz-Copy-Source-Range")
	if size < 0 {
		return errf(ErrInvalidArgument, "Range specified is not valid for source object: %s starts past the source's end", rng)
	}
	return errf(ErrInvalidArgument, "Range specified is not valid for source object of size: %d (%s)", size, rng)
}

// uploadPartCopy is UploadPartCopy: a part of an upload copied from an
// existing object, whole or the x-amz-copy-source-range of it, streamed
// through the gateway as CopyObject is, up to S3's 5 GiB a part.
func (g *Gateway) uploadPartCopy(req *request) error {
	r := req.r
	if r.Method != http.MethodPut {
		return errf(ErrInvalidRequest, "x-amz-copy-source belongs on a PUT")
	}
	q := req.query()
	n, err := partNumber(q)
	if err != nil {
		return err
	}
	opts := client.GetOptions{}
	var rng byteRange
	ranged := r.Header.Get("X-Amz-Copy-Source-Range") != ""
	if ranged {
		if rng, err = parseCopySourceRange(r.Header.Get("X-Amz-Copy-Source-Range")); err != nil {
			return err
		}
		opts = client.GetOptions{Range: true, Offset: rng.first, Length: rng.length()}
	}
	src, info, err := g.openCopySource(req, opts)
	if err != nil {
		if ranged && errors.Is(err, client.ErrInvalidRange) {
			// A first byte past the end: said in S3's terms, not the store's.
			return copyRangeInvalid(r, -1)
		}
		return err
	}
	defer src.Close()
	size := info.Size
	if ranged {
		if rng.last >= info.Size {
			return copyRangeInvalid(r, info.Size)
		}
		size = opts.Length
	}
	if size > maxObjectSize {
		return errf(ErrEntityTooLarge, "a part is at most 5 GiB: copy a range of the source")
	}
	return g.answerLong(req, func() (any, error) {
		p, err := g.cl.PutObjectPart(r.Context(), req.bucket, req.key, q.Get("uploadId"), n, src, size)
		if err != nil {
			return nil, err
		}
		return copyPartResult{XMLNS: s3XMLNS, LastModified: s3Time(time.Now()), ETag: quoteETag(p.ETag)}, nil
	})
}

package s3gw

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/xml"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/crc32c"
)

// S3's multipart upload API over the SDK's: the parts go to the cluster
// as they come, and CompleteMultipartUpload makes the object from them. A
// part streams into one SDK send buffer of its size up to 64 MiB (what
// one op carries), and above, up to S3's 5 GiB, in pieces of 16 MiB, 4 in
// flight (client.PutObjectPart), so memory per request is 64 MiB at most
// whatever the part's size, and the part's ETag is still its MD5.

type initiateMultipartUploadResult struct {
	XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
	XMLNS    string   `xml:"xmlns,attr"`
	Bucket   string
	Key      xmlText
	UploadID string `xml:"UploadId"`
}

func (g *Gateway) createMultipartUpload(req *request) error {
	meta, err := objectMetadata(req.r.Header)
	if err != nil {
		return err
	}
	id, err := g.cl.NewMultipartUpload(req.r.Context(), req.bucket, req.key,
		client.PutOptions{ContentType: req.r.Header.Get("Content-Type"), UserMetadata: meta})
	if err != nil {
		return err
	}
	// The checksum the parts will carry, said back as S3 does (the SDKs
	// read it); unknownChecksums refused an algorithm not checked. Only
	// the parts' CRC32C is kept (docs/s3.md).
	h := req.w.Header()
	if alg := strings.TrimSpace(req.r.Header.Get("X-Amz-Checksum-Algorithm")); alg != "" {
		h.Set("X-Amz-Checksum-Algorithm", strings.ToUpper(alg))
		if typ := strings.ToUpper(strings.TrimSpace(req.r.Header.Get("X-Amz-Checksum-Type"))); typ == "FULL_OBJECT" || typ == "COMPOSITE" {
			h.Set("X-Amz-Checksum-Type", typ)
		}
	}
	writeXML(req.w, http.StatusOK, initiateMultipartUploadResult{XMLNS: s3XMLNS, Bucket: req.bucket, Key: xmlText(req.key), UploadID: id})
	return nil
}

// partNumber reads ?partNumber: 1 to 10000.
func partNumber(q url.Values) (int, error) {
	n, err := strconv.Atoi(q.Get("partNumber"))
	if err != nil || n < 1 || n > 10000 {
		return 0, errf(ErrInvalidArgument, "part number must be an integer between 1 and 10000, inclusive")
	}
	return n, nil
}

func (g *Gateway) uploadPart(req *request) error {
	r := req.r
	q := req.query()
	n, err := partNumber(q)
	if err != nil {
		return err
	}
	if r.ContentLength < 0 {
		return errf(ErrMissingContentLength, "you must provide the Content-Length HTTP header")
	}
	if r.ContentLength > maxObjectSize {
		return errf(ErrEntityTooLarge, "your proposed upload exceeds the maximum allowed size of 5 GiB")
	}
	if err := g.bucketBeforeContinue(req); err != nil {
		return err
	}
	p, err := g.cl.PutObjectPart(r.Context(), req.bucket, req.key, q.Get("uploadId"), n, r.Body, r.ContentLength)
	if err != nil {
		return err
	}
	req.w.Header().Set("ETag", quoteETag(p.ETag))
	echoChecksum(req)
	req.w.WriteHeader(http.StatusOK)
	return nil
}

// completeRequest is CompleteMultipartUpload's body.
type completeRequest struct {
	XMLName xml.Name       `xml:"CompleteMultipartUpload"`
	Parts   []completePart `xml:"Part"`
}

type completePart struct {
	// Pointers, to tell an element left out, which S3 answers
	// MalformedXML, from a 0 or an empty ETag.
	PartNumber *int
	ETag       *string
	// The part's CRC32C as UploadPart answered it: checked against the
	// part's. The other algorithms' are not kept, so not checked.
	ChecksumCRC32C string
}

// parseCompleteRequest parses and checks CompleteMultipartUpload's XML.
func parseCompleteRequest(b []byte) (completeRequest, error) {
	var c completeRequest
	if err := xml.Unmarshal(b, &c); err != nil {
		return c, errf(ErrMalformedXML, "the XML you provided was not well-formed: %v", err)
	}
	if len(c.Parts) == 0 || len(c.Parts) > 10000 {
		return c, errf(ErrMalformedXML, "a CompleteMultipartUpload names 1 to 10000 parts, not %d", len(c.Parts))
	}
	for i, p := range c.Parts {
		if p.PartNumber == nil || p.ETag == nil {
			return c, errf(ErrMalformedXML, "part %d of the CompleteMultipartUpload lacks its PartNumber or its ETag", i+1)
		}
	}
	return c, nil
}

type completeMultipartUploadResult struct {
	XMLName  xml.Name `xml:"CompleteMultipartUploadResult"`
	XMLNS    string   `xml:"xmlns,attr"`
	Location string
	Bucket   string
	Key      xmlText
	ETag     string
	// The whole object's CRC32C, for a completion that gave one or asked
	// for FULL_OBJECT (the SDK then checks it, as AWS answers).
	ChecksumCRC32C string `xml:",omitempty"`
	ChecksumType   string `xml:",omitempty"`
}

func (g *Gateway) completeMultipartUpload(req *request) error {
	b, err := readSmall(req.r.Body, req.r.ContentLength, maxXMLBody)
	if err != nil {
		return err
	}
	c, err := parseCompleteRequest(b)
	if err != nil {
		return err
	}
	parts := make([]client.CompletePart, len(c.Parts))
	for i, p := range c.Parts {
		parts[i] = client.CompletePart{PartNumber: *p.PartNumber, ETag: *p.ETag}
	}
	ifMatch, ifNoneMatch, err := writeConditions(req.r.Header)
	if err != nil {
		return err
	}
	wholeCRC32C, err := g.checkCompleteChecksums(req, c)
	if err != nil {
		return err
	}
	info, err := g.cl.CompleteMultipartUpload(req.r.Context(), req.bucket, req.key, req.query().Get("uploadId"), parts,
		client.CompleteOptions{IfMatch: ifMatch, IfNoneMatch: ifNoneMatch})
	if client.ErrorCode(err) == "NoSuchUpload" {
		info, err = g.completedBefore(req, parts, err)
	}
	if err != nil {
		return err
	}
	res := completeMultipartUploadResult{XMLNS: s3XMLNS, Location: objectURL(req.r), Bucket: req.bucket, Key: xmlText(req.key), ETag: quoteETag(info.ETag)}
	if wholeCRC32C || strings.EqualFold(req.r.Header.Get("X-Amz-Checksum-Type"), "FULL_OBJECT") {
		// A composite CRC32C (minio-go's default: no -N, the type said)
		// is the parts' checksums' checksum, which Osprey neither keeps
		// nor checks (checkCompleteChecksums): not answered as the whole
		// object's.
		res.ChecksumCRC32C, res.ChecksumType = crc32cBase64(info.CRC32C), "FULL_OBJECT"
	}
	writeXML(req.w, http.StatusOK, res)
	return nil
}

// checkCompleteChecksums checks the CRC32Cs a CompleteMultipartUpload
// gives, before it completes anything: each part's ChecksumCRC32C against
// the part's (InvalidPart), and an x-amz-checksum-crc32c header, the whole
// object's, against the CRC32C of the parts named, combined (BadDigest).
// Osprey keeps no other algorithm's checksum of a part, so a whole-object
// CRC32, CRC64NVME, SHA-1 or SHA-256, or a composite (-N) value, is
// checked for its form only: each part's was checked as it was uploaded.
// A part that is not there, or has another ETag, is left to the
// completion to refuse (InvalidPart). wholeCRC32C says the header was a
// whole-object CRC32C (not a composite's), which the answer repeats.
func (g *Gateway) checkCompleteChecksums(req *request, c completeRequest) (wholeCRC32C bool, err error) {
	whole := ""
	for name := range checksumAlgorithms {
		v := headerOf(req.r.Header, checksumHeaders[name])
		if v == "" {
			continue
		}
		if whole != "" {
			return false, errf(ErrInvalidRequest, "expecting a single x-amz-checksum- header; multiple checksum types are not allowed")
		}
		whole = name
		sum, n, composite := strings.Cut(v, "-")
		raw, err := base64.StdEncoding.DecodeString(sum)
		if err != nil || len(raw) != checksumAlgorithms[name]().Size() || composite && !validPartCount(n) {
			return false, errf(ErrInvalidRequest, "value for x-amz-checksum-%s header is invalid", name)
		}
		if name != "crc32c" || composite || strings.EqualFold(req.r.Header.Get("X-Amz-Checksum-Type"), "COMPOSITE") {
			whole = "" // a checksum of the parts' checksums: not kept, not checked
		}
	}
	perPart := slices.ContainsFunc(c.Parts, func(p completePart) bool { return p.ChecksumCRC32C != "" })
	if whole == "" && !perPart {
		return false, nil
	}
	have, err := g.cl.ListObjectParts(req.r.Context(), req.bucket, req.key, req.query().Get("uploadId"))
	if err != nil {
		return false, err
	}
	byNumber := make(map[int]client.ObjectPart, len(have))
	for _, p := range have {
		byNumber[p.PartNumber] = p
	}
	var crc uint32
	for i, p := range c.Parts {
		got, ok := byNumber[*p.PartNumber]
		if !ok || strings.Trim(got.ETag, `"`) != strings.Trim(*p.ETag, `"`) {
			return whole != "", nil // the completion refuses it
		}
		if p.ChecksumCRC32C != "" && p.ChecksumCRC32C != crc32cBase64(got.CRC32C) {
			return false, errf(ErrInvalidPart, "part %d's ChecksumCRC32C %s is not the part's, %s", *p.PartNumber, p.ChecksumCRC32C, crc32cBase64(got.CRC32C))
		}
		if i == 0 {
			crc = got.CRC32C
		} else {
			crc = crc32c.Combine(crc, got.CRC32C, got.Size)
		}
	}
	if whole != "" && headerOf(req.r.Header, checksumHeaders[whole]) != crc32cBase64(crc) {
		return false, errf(ErrBadDigest, "the CRC32C you specified did not match the calculated checksum")
	}
	return whole != "", nil
}

// validPartCount is the -N of a composite checksum: 1 to 10000.
func validPartCount(n string) bool {
	v, err := strconv.Atoi(n)
	return err == nil && v >= 1 && v <= 10000
}

// crc32cBase64 is a CRC32C as S3's headers and XML carry it.
func crc32cBase64(c uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], c)
	return base64.StdEncoding.EncodeToString(b[:])
}

// uploadOrBucket answers NoSuchBucket for an upload's operation in a
// bucket that is not there, as S3 answers any request to a missing
// bucket: the upload's record is found by bucket, key and upload ID, so
// the SDK can only say NoSuchUpload. The stat is paid on that error
// alone.
func (g *Gateway) uploadOrBucket(req *request, err error) error {
	if client.ErrorCode(err) != "NoSuchUpload" || req.bucket == "" {
		return err
	}
	if _, serr := g.cl.StatBucket(req.r.Context(), req.bucket); client.ErrorCode(serr) == "NoSuchBucket" {
		return serr
	}
	return err
}

// objectURL is the object's absolute URL, as S3 gives it in a completed
// upload's Location: the request's own path (/BUCKET/KEY, or /KEY on a
// virtual-hosted bucket) on the host and scheme the client used.
func objectURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + r.URL.EscapedPath()
}

// completedBefore answers a CompleteMultipartUpload of an upload that is
// gone: when the key holds an object made of exactly these parts, the
// request is a retry of the completion that made it, and succeeds again
// with the object's ETag, as on S3 (a client whose first answer was lost
// retries; ceph/s3-tests' test_multipart_upload completes twice).
// Otherwise the upload is NoSuchUpload, errNoUpload.
func (g *Gateway) completedBefore(req *request, parts []client.CompletePart, errNoUpload error) (client.ObjectInfo, error) {
	info, err := g.cl.StatObject(req.r.Context(), req.bucket, req.key)
	if err != nil || len(info.Parts) != len(parts) {
		return info, errNoUpload
	}
	for i, p := range parts {
		if info.Parts[i].PartNumber != p.PartNumber || !strings.EqualFold(info.Parts[i].ETag, strings.Trim(p.ETag, `"`)) {
			return info, errNoUpload
		}
	}
	return info, nil
}

func (g *Gateway) abortMultipartUpload(req *request) error {
	if err := g.cl.AbortMultipartUpload(req.r.Context(), req.bucket, req.key, req.query().Get("uploadId")); err != nil {
		return err
	}
	req.w.WriteHeader(http.StatusNoContent)
	return nil
}

type partEntry struct {
	PartNumber   int
	LastModified string
	ETag         string
	Size         int64
}

type listPartsResult struct {
	XMLName              xml.Name `xml:"ListPartsResult"`
	XMLNS                string   `xml:"xmlns,attr"`
	Bucket               string
	Key                  xmlText
	UploadID             string `xml:"UploadId"`
	Initiator            owner
	Owner                owner
	StorageClass         string
	PartNumberMarker     int
	NextPartNumberMarker int
	MaxParts             int
	IsTruncated          bool
	Parts                []partEntry `xml:"Part"`
}

// boundedInt reads an optional non-negative integer parameter, capped.
func boundedInt(q url.Values, name string, def, most int) (int, error) {
	if !q.Has(name) {
		return def, nil
	}
	n, err := strconv.Atoi(q.Get(name))
	if err != nil || n < 0 {
		return 0, errf(ErrInvalidArgument, "%s must be a non-negative integer", name)
	}
	return min(n, most), nil
}

func (g *Gateway) listParts(req *request) error {
	q := req.query()
	maxParts, err := boundedInt(q, "max-parts", 1000, 1000)
	if err != nil {
		return err
	}
	marker, err := boundedInt(q, "part-number-marker", 0, 10000)
	if err != nil {
		return err
	}
	id := q.Get("uploadId")
	parts, err := g.cl.ListObjectParts(req.r.Context(), req.bucket, req.key, id)
	if err != nil {
		return err
	}
	res := listPartsResult{XMLNS: s3XMLNS, Bucket: req.bucket, Key: xmlText(req.key), UploadID: id, Initiator: ownerOf(req), Owner: ownerOf(req),
		StorageClass: "STANDARD", PartNumberMarker: marker, MaxParts: maxParts}
	for _, p := range parts {
		if p.PartNumber <= marker {
			continue
		}
		// max-parts=0 asks for an empty page, as max-keys=0 and
		// max-uploads=0 do: not truncated, or a client paging until
		// IsTruncated is false would ask forever without moving.
		if maxParts == 0 {
			break
		}
		if len(res.Parts) == maxParts {
			res.IsTruncated = true
			break
		}
		res.Parts = append(res.Parts, partEntry{PartNumber: p.PartNumber, LastModified: s3Time(p.LastModified), ETag: quoteETag(p.ETag), Size: p.Size})
		res.NextPartNumberMarker = p.PartNumber
	}
	writeXML(req.w, http.StatusOK, res)
	return nil
}

type uploadEntry struct {
	Key          xmlText
	UploadID     string `xml:"UploadId"`
	Initiator    owner
	Owner        owner
	StorageClass string
	Initiated    string
}

type listMultipartUploadsResult struct {
	XMLName            xml.Name `xml:"ListMultipartUploadsResult"`
	XMLNS              string   `xml:"xmlns,attr"`
	Bucket             string
	KeyMarker          xmlText
	UploadIDMarker     xmlText `xml:"UploadIdMarker"`
	NextKeyMarker      xmlText
	NextUploadIDMarker string `xml:"NextUploadIdMarker"`
	Prefix             xmlText
	Delimiter          xmlText `xml:",omitempty"`
	MaxUploads         int
	EncodingType       string `xml:",omitempty"`
	IsTruncated        bool
	Uploads            []uploadEntry `xml:"Upload"`
	CommonPrefixes     []commonPrefix
}

// uploadsQuery is ListMultipartUploads' parameters.
type uploadsQuery struct {
	opts         client.UploadListOptions
	encodingType string // "" or "url"
}

// parseUploadsQuery reads ListMultipartUploads' query parameters:
// max-uploads 0 to 1000 (more is 1000, as S3), encoding-type url or none.
func parseUploadsQuery(q url.Values) (uploadsQuery, error) {
	max, err := boundedInt(q, "max-uploads", 1000, 1000)
	if err != nil {
		return uploadsQuery{}, err
	}
	uq := uploadsQuery{opts: client.UploadListOptions{Prefix: q.Get("prefix"), Delimiter: q.Get("delimiter"),
		KeyMarker: q.Get("key-marker"), UploadIDMarker: q.Get("upload-id-marker"), MaxUploads: max},
		encodingType: q.Get("encoding-type")}
	if uq.encodingType != "" && uq.encodingType != "url" {
		return uploadsQuery{}, errf(ErrInvalidArgument, "invalid encoding-type %q: only url", uq.encodingType)
	}
	if uq.opts.KeyMarker == "" {
		// S3 ignores upload-id-marker without key-marker.
		uq.opts.UploadIDMarker = ""
	}
	return uq, nil
}

func (g *Gateway) listMultipartUploads(req *request) error {
	uq, err := parseUploadsQuery(req.query())
	if err != nil {
		return err
	}
	ctx, o := req.r.Context(), uq.opts
	enc := func(s string) xmlText { return listedKey(uq.encodingType, s) }
	res := listMultipartUploadsResult{XMLNS: s3XMLNS, Bucket: req.bucket, KeyMarker: enc(o.KeyMarker), UploadIDMarker: xmlText(o.UploadIDMarker),
		Prefix: enc(o.Prefix), Delimiter: enc(o.Delimiter), MaxUploads: o.MaxUploads, EncodingType: uq.encodingType}
	var page client.UploadsPage
	if o.MaxUploads == 0 {
		// An empty page, not truncated, as for max-keys=0; the bucket
		// must exist all the same.
		if _, err := g.cl.StatBucket(ctx, req.bucket); err != nil {
			return err
		}
	} else if page, err = g.cl.ListUploadsPage(ctx, req.bucket, o); err != nil { // which checks the bucket
		return err
	}
	// The gateway aborts with its own identity, which may do anything: a
	// listing collects stale internal uploads only for a requester who
	// may write the bucket, never on behalf of a read-only one (the
	// hourly sweep is the gateway's own doing).
	if req.authorize(write, req.bucket) == nil {
		g.abortStaleUploads(ctx, req.bucket, o.Prefix)
	}
	res.IsTruncated = page.IsTruncated
	res.NextKeyMarker, res.NextUploadIDMarker = enc(page.NextKeyMarker), page.NextUploadIDMarker
	for _, u := range page.Uploads {
		if u.IsPrefix {
			res.CommonPrefixes = append(res.CommonPrefixes, commonPrefix{Prefix: enc(u.Key)})
			continue
		}
		res.Uploads = append(res.Uploads, uploadEntry{Key: enc(u.Key), UploadID: u.UploadID, Initiator: ownerOf(req), Owner: ownerOf(req),
			StorageClass: "STANDARD", Initiated: s3Time(u.Initiated)})
	}
	writeXML(req.w, http.StatusOK, res)
	return nil
}

// abortStaleUploads aborts bucket's internal uploads under prefix older
// than StaleUploadAge (Options), best effort: what fails is logged.
func (g *Gateway) abortStaleUploads(ctx context.Context, bucket, prefix string) {
	if g.opts.StaleUploadAge < 0 {
		return
	}
	ups, err := g.cl.AbortStaleUploads(ctx, bucket, client.StaleUploadOptions{Prefix: prefix, Age: g.opts.StaleUploadAge, Now: g.opts.StaleUploadNow})
	for _, u := range ups {
		g.log.Info("aborted a stale internal upload", "bucket", bucket, "key", u.Key, "upload", u.UploadID, "initiated", u.Initiated)
	}
	if err != nil && ctx.Err() == nil {
		g.log.Warn("aborting stale internal uploads", "bucket", bucket, "err", err)
	}
}

// sweepStaleUploads aborts the stale internal uploads of every bucket
// every StaleUploadSweep until ctx is done: those of a gateway that died
// during a large PUT are collected even if nobody lists its bucket's
// uploads. Several gateways sweeping at once only race to abort the same
// uploads, which is harmless.
func (g *Gateway) sweepStaleUploads(ctx context.Context) {
	tick := time.NewTicker(g.opts.StaleUploadSweep)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		buckets, err := g.cl.ListBuckets(ctx)
		if err != nil {
			if ctx.Err() == nil {
				g.log.Warn("sweeping stale internal uploads: listing buckets", "err", err)
			}
			continue
		}
		for _, b := range buckets {
			g.abortStaleUploads(ctx, b.Name, "")
		}
	}
}

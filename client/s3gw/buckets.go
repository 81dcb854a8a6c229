package s3gw

import (
	"bytes"
	"encoding/base64"
	"encoding/xml"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/sigv4"
)

type owner struct {
	ID          string
	DisplayName string
}

type bucketEntry struct {
	Name         string
	CreationDate string
	BucketRegion string // the gateway's one region (Options.Region), as GetBucketLocation answers
}

type listAllMyBucketsResult struct {
	XMLName           xml.Name      `xml:"ListAllMyBucketsResult"`
	XMLNS             string        `xml:"xmlns,attr"`
	Buckets           []bucketEntry `xml:"Buckets>Bucket"`
	Owner             owner         `xml:"Owner"`
	ContinuationToken string        `xml:",omitempty"`
	Prefix            *xmlText      `xml:",omitempty"`
}

// maxBucketsPage is S3's page of ListBuckets when a request pages
// (prefix, continuation-token, bucket-region or max-buckets) and its
// largest max-buckets; a request with none of them gets every bucket.
const maxBucketsPage = 10000

// bucketsQuery is a ListBuckets' paging: after is the name the page
// starts after (from continuation-token), max 0 for no limit.
type bucketsQuery struct {
	prefix    *string
	after     string
	max       int
	regionOff bool // bucket-region names another region: nothing is there
}

func (g *Gateway) parseBucketsQuery(q url.Values) (bucketsQuery, error) {
	var bq bucketsQuery
	if q.Has("prefix") {
		p := q.Get("prefix")
		bq.prefix = &p
	}
	if q.Has("prefix") || q.Has("continuation-token") || q.Has("bucket-region") {
		bq.max = maxBucketsPage
	}
	if q.Has("max-buckets") {
		n, err := strconv.Atoi(q.Get("max-buckets"))
		if err != nil || n < 1 || n > maxBucketsPage {
			return bq, errf(ErrInvalidArgument, "max-buckets must be an integer from 1 to %d", maxBucketsPage)
		}
		bq.max = n
	}
	if tok := q.Get("continuation-token"); tok != "" {
		name, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || ops.CheckBucketName(string(name)) != nil {
			return bq, errf(ErrInvalidArgument, "the continuation token provided is incorrect")
		}
		bq.after = string(name)
	}
	bq.regionOff = q.Has("bucket-region") && q.Get("bucket-region") != g.opts.Region
	return bq, nil
}

// ownerOf is the owner the gateway reports: the key's entity, or a static
// key itself.
func ownerOf(req *request) owner {
	if req.who.Entity != "" {
		return owner{ID: req.who.Entity, DisplayName: req.who.Entity}
	}
	return owner{ID: req.access, DisplayName: req.access}
}

func (g *Gateway) listBuckets(req *request) error {
	bq, err := g.parseBucketsQuery(req.r.URL.Query())
	if err != nil {
		return err
	}
	bs, err := g.cl.ListBuckets(req.r.Context())
	if err != nil {
		return err
	}
	slices.SortFunc(bs, func(a, b client.BucketInfo) int { return strings.Compare(a.Name, b.Name) })
	res := listAllMyBucketsResult{XMLNS: s3XMLNS, Owner: ownerOf(req), Buckets: []bucketEntry{}, Prefix: (*xmlText)(bq.prefix)}
	for _, b := range bs {
		switch {
		case bq.regionOff || b.Name <= bq.after && bq.after != "":
			continue
		case bq.prefix != nil && !strings.HasPrefix(b.Name, *bq.prefix):
			continue
		case req.authorize(read, b.Name) != nil:
			continue // a bucket the caller may not read is not its own
		}
		if bq.max > 0 && len(res.Buckets) == bq.max {
			// One more to list: the token says where the next page starts.
			res.ContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(res.Buckets[len(res.Buckets)-1].Name))
			break
		}
		res.Buckets = append(res.Buckets, bucketEntry{Name: b.Name, CreationDate: s3Time(b.Created), BucketRegion: g.opts.Region})
	}
	writeXML(req.w, http.StatusOK, res)
	return nil
}

func (g *Gateway) createBucket(req *request) error {
	// A CreateBucketConfiguration (LocationConstraint) may come; one
	// region here, so it is read, checked and not kept.
	b, err := readSmall(req.r.Body, req.r.ContentLength, 64<<10)
	if err != nil {
		return err
	}
	if err := parseCreateBucket(b); err != nil {
		return err
	}
	if err := g.cl.MakeBucket(req.r.Context(), req.bucket); err != nil {
		return err
	}
	req.w.Header().Set("Location", "/"+req.bucket)
	req.w.WriteHeader(http.StatusOK)
	return nil
}

func (g *Gateway) deleteBucket(req *request) error {
	if err := g.cl.RemoveBucket(req.r.Context(), req.bucket); err != nil {
		return err
	}
	req.w.WriteHeader(http.StatusNoContent)
	return nil
}

func (g *Gateway) headBucket(req *request) error {
	if _, err := g.cl.StatBucket(req.r.Context(), req.bucket); err != nil {
		return err
	}
	req.w.Header().Set("x-amz-bucket-region", g.opts.Region)
	req.w.WriteHeader(http.StatusOK)
	return nil
}

// parseCreateBucket checks a CreateBucket's body: none, or a well-formed
// CreateBucketConfiguration.
func parseCreateBucket(b []byte) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	var c struct {
		XMLName            xml.Name `xml:"CreateBucketConfiguration"`
		LocationConstraint string
	}
	if err := xml.Unmarshal(b, &c); err != nil {
		return errf(ErrMalformedXML, "the XML you provided was not well-formed or did not validate against our published schema: %v", err)
	}
	return nil
}

type locationConstraint struct {
	XMLName xml.Name `xml:"LocationConstraint"`
	XMLNS   string   `xml:"xmlns,attr"`
	Region  string   `xml:",chardata"`
}

func (g *Gateway) bucketLocation(req *request) error {
	if _, err := g.cl.StatBucket(req.r.Context(), req.bucket); err != nil {
		return err
	}
	region := g.opts.Region
	if region == "us-east-1" {
		region = "" // S3's answer for its first region
	}
	writeXML(req.w, http.StatusOK, locationConstraint{XMLNS: s3XMLNS, Region: region})
	return nil
}

type versioningConfiguration struct {
	XMLName xml.Name `xml:"VersioningConfiguration"`
	XMLNS   string   `xml:"xmlns,attr"`
}

// bucketVersioning answers GetBucketVersioning as S3 does for a bucket
// whose versioning was never enabled: an empty configuration, no Status.
// A bucket keeps one version of each object, so that is every bucket's;
// sync tools (rclone's purge) ask before they delete.
func (g *Gateway) bucketVersioning(req *request) error {
	if _, err := g.cl.StatBucket(req.r.Context(), req.bucket); err != nil {
		return err
	}
	writeXML(req.w, http.StatusOK, versioningConfiguration{XMLNS: s3XMLNS})
	return nil
}

// putBucketVersioning refuses to enable (or suspend) versioning, which a
// bucket does not have.
func (g *Gateway) putBucketVersioning(req *request) error {
	return errf(ErrNotImplemented, "versioning is not implemented: a bucket keeps one version of each object")
}

// listQuery is a listing request's parameters, v1 and v2 together.
type listQuery struct {
	v2           bool
	prefix       string
	delimiter    string
	maxKeys      int
	marker       string // v1
	token        string // v2 continuation-token
	hasToken     bool   // continuation-token was sent, maybe empty
	startAfter   string // v2
	fetchOwner   bool
	encodingType string // "" or "url"
}

// parseListQuery reads a listing's query parameters.
func parseListQuery(q url.Values, v2 bool) (listQuery, error) {
	lq := listQuery{v2: v2, prefix: q.Get("prefix"), delimiter: q.Get("delimiter"), maxKeys: 1000,
		marker: q.Get("marker"), token: q.Get("continuation-token"), startAfter: q.Get("start-after"),
		fetchOwner: q.Get("fetch-owner") == "true", encodingType: q.Get("encoding-type"), hasToken: q.Has("continuation-token")}
	if q.Has("max-keys") {
		n, err := strconv.Atoi(q.Get("max-keys"))
		if err != nil || n < 0 {
			return lq, errf(ErrInvalidArgument, "max-keys must be a non-negative integer")
		}
		lq.maxKeys = min(n, 1000)
	}
	if lq.encodingType != "" && lq.encodingType != "url" {
		return lq, errf(ErrInvalidArgument, "invalid encoding-type %q: only url", lq.encodingType)
	}
	return lq, nil
}

// urlEncodeKey is a key (or prefix, marker, delimiter) as a listing with
// encoding-type=url gives it: SigV4's URI encoding with '/' kept, so a
// space is %20. That is what ceph/s3-tests expects
// (test_bucket_list_encoding_basic: "quux%20ab/"), and it decodes the same
// whether a client unescapes '+' as a space (boto3) or not.
func urlEncodeKey(s string) string { return sigv4.Escape(s, true) }

// listedKey is a key (prefix, marker) as a listing writes it: URL-encoded
// with encoding-type=url, else as it is.
func listedKey(encodingType, s string) xmlText {
	if encodingType == "url" {
		return xmlText(urlEncodeKey(s))
	}
	return xmlText(s)
}

type listEntry struct {
	Key          xmlText
	LastModified string
	ETag         string
	Size         int64
	StorageClass string
	Owner        *owner `xml:",omitempty"`
}

type commonPrefix struct {
	Prefix xmlText
}

// listBucketResult is both versions' answer; the fields of the other
// version stay empty and are omitted.
type listBucketResult struct {
	XMLName               xml.Name `xml:"ListBucketResult"`
	XMLNS                 string   `xml:"xmlns,attr"`
	Name                  string
	Prefix                xmlText
	Marker                *xmlText `xml:",omitempty"`
	NextMarker            xmlText  `xml:",omitempty"`
	ContinuationToken     *xmlText `xml:",omitempty"`
	NextContinuationToken string   `xml:",omitempty"`
	StartAfter            xmlText  `xml:",omitempty"`
	KeyCount              *int     `xml:",omitempty"`
	MaxKeys               int
	Delimiter             xmlText `xml:",omitempty"`
	EncodingType          string  `xml:",omitempty"`
	IsTruncated           bool
	Contents              []listEntry
	CommonPrefixes        []commonPrefix
}

func (g *Gateway) listObjectsV1(req *request) error { return g.listObjects(req, false) }

func (g *Gateway) listObjectsV2(req *request) error { return g.listObjects(req, true) }

func (g *Gateway) listObjects(req *request, v2 bool) error {
	lq, err := parseListQuery(req.query(), v2)
	if err != nil {
		return err
	}
	enc := func(s string) xmlText { return listedKey(lq.encodingType, s) }
	res := listBucketResult{XMLNS: s3XMLNS, Name: req.bucket, Prefix: enc(lq.prefix), MaxKeys: lq.maxKeys,
		Delimiter: enc(lq.delimiter), EncodingType: lq.encodingType}
	opts := client.ListOptions{Prefix: lq.prefix, Delimiter: lq.delimiter, MaxKeys: lq.maxKeys}
	if v2 {
		// An empty continuation-token is none, echoed back as sent
		// (test_bucket_listv2_continuationtoken_empty).
		if lq.hasToken {
			tok := xmlText(lq.token)
			res.ContinuationToken = &tok
		}
		res.StartAfter = enc(lq.startAfter)
		opts.ContinuationToken, opts.StartAfter = lq.token, lq.startAfter
	} else {
		m := enc(lq.marker)
		res.Marker = &m
		// A NextMarker that was a common prefix goes on after everything
		// it rolled up: the OSDs skip a StartAfter that is one.
		opts.StartAfter = lq.marker
	}
	page, err := g.listPage(req, opts)
	if err != nil {
		if client.ErrorCode(err) == "InvalidArgument" && v2 && lq.token != "" {
			return errf(ErrInvalidArgument, "the continuation token provided is incorrect")
		}
		return err
	}
	res.IsTruncated = page.IsTruncated
	for _, o := range page.Objects {
		if o.IsPrefix {
			res.CommonPrefixes = append(res.CommonPrefixes, commonPrefix{Prefix: enc(o.Key)})
			continue
		}
		e := listEntry{Key: enc(o.Key), LastModified: s3Time(o.LastModified), ETag: quoteETag(o.ETag), Size: o.Size, StorageClass: "STANDARD"}
		if !v2 || lq.fetchOwner {
			ow := ownerOf(req)
			e.Owner = &ow
		}
		res.Contents = append(res.Contents, e)
	}
	if v2 {
		n := len(page.Objects)
		res.KeyCount = &n
		res.NextContinuationToken = page.NextContinuationToken
	} else if page.IsTruncated && lq.delimiter != "" && len(page.Objects) > 0 {
		// S3 gives NextMarker only with a delimiter; without one, clients
		// continue after the last key.
		res.NextMarker = enc(page.Objects[len(page.Objects)-1].Key)
	}
	writeXML(req.w, http.StatusOK, res)
	return nil
}

// listPage is a page of req's bucket listed with opts; with MaxKeys 0 an
// empty page that is not truncated, as S3 answers, once the bucket is
// found to exist all the same.
func (g *Gateway) listPage(req *request, opts client.ListOptions) (client.ListPage, error) {
	if opts.MaxKeys == 0 {
		_, err := g.cl.StatBucket(req.r.Context(), req.bucket)
		return client.ListPage{}, err
	}
	return g.cl.ListObjectsPage(req.r.Context(), req.bucket, opts)
}

// listVersionsResult is ListObjectVersions' answer.
type listVersionsResult struct {
	XMLName             xml.Name `xml:"ListVersionsResult"`
	XMLNS               string   `xml:"xmlns,attr"`
	Name                string
	Prefix              xmlText
	KeyMarker           xmlText
	VersionIdMarker     string
	NextKeyMarker       xmlText `xml:",omitempty"`
	NextVersionIdMarker string  `xml:",omitempty"`
	MaxKeys             int
	Delimiter           xmlText `xml:",omitempty"`
	EncodingType        string  `xml:",omitempty"`
	IsTruncated         bool
	Versions            []versionEntry `xml:"Version"`
	CommonPrefixes      []commonPrefix
}

type versionEntry struct {
	Key          xmlText
	VersionId    string
	IsLatest     bool
	LastModified string
	ETag         string
	Size         int64
	Owner        owner
	StorageClass string
}

// listObjectVersions lists a bucket's objects as S3 lists the versions of
// a bucket that never had versioning: each object's one version, "null",
// the latest, and no delete markers. Clean-up code walks it to delete
// "every version" (boto3's bucket.object_versions.delete(), Terraform's
// force_destroy, aws s3api list-object-versions), and those versions are
// what a GET or DELETE with versionId=null addresses.
func (g *Gateway) listObjectVersions(req *request) error {
	q := req.query()
	lq, err := parseListQuery(q, false)
	if err != nil {
		return err
	}
	lq.marker = q.Get("key-marker")
	vm := q.Get("version-id-marker")
	switch {
	case vm != "" && lq.marker == "":
		return errf(ErrInvalidArgument, "a version-id marker cannot be specified without a key marker")
	case vm != "" && vm != nullVersion:
		return errf(ErrInvalidArgument, "invalid version id specified: a bucket keeps one version of each object, null")
	}
	enc := func(s string) xmlText { return listedKey(lq.encodingType, s) }
	res := listVersionsResult{XMLNS: s3XMLNS, Name: req.bucket, Prefix: enc(lq.prefix), KeyMarker: enc(lq.marker), VersionIdMarker: vm,
		MaxKeys: lq.maxKeys, Delimiter: enc(lq.delimiter), EncodingType: lq.encodingType}
	// After key-marker whether or not version-id-marker names its one
	// version: either way the key was listed.
	page, err := g.listPage(req, client.ListOptions{Prefix: lq.prefix, Delimiter: lq.delimiter, MaxKeys: lq.maxKeys, StartAfter: lq.marker})
	if err != nil {
		return err
	}
	res.IsTruncated = page.IsTruncated
	ow := ownerOf(req)
	for _, o := range page.Objects {
		if o.IsPrefix {
			res.CommonPrefixes = append(res.CommonPrefixes, commonPrefix{Prefix: enc(o.Key)})
			continue
		}
		res.Versions = append(res.Versions, versionEntry{Key: enc(o.Key), VersionId: nullVersion, IsLatest: true,
			LastModified: s3Time(o.LastModified), ETag: quoteETag(o.ETag), Size: o.Size, Owner: ow, StorageClass: "STANDARD"})
	}
	if page.IsTruncated && len(page.Objects) > 0 {
		// A common prefix as the marker goes on after all it rolled up,
		// as ListObjects' NextMarker does.
		last := page.Objects[len(page.Objects)-1]
		res.NextKeyMarker = enc(last.Key)
		if !last.IsPrefix {
			res.NextVersionIdMarker = nullVersion
		}
	}
	writeXML(req.w, http.StatusOK, res)
	return nil
}

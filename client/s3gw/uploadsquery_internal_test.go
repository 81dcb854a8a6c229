package s3gw

import (
	"net/url"
	"testing"

	"github.com/ospreystore/osprey/internal/ops"
)

func FuzzParseUploadsQuery(f *testing.F) {
	f.Add("uploads&prefix=a%2F&delimiter=%2F&key-marker=k&upload-id-marker=u&max-uploads=3&encoding-type=url")
	f.Add("uploads&upload-id-marker=u&max-uploads=-1")
	f.Add("uploads&max-uploads=99999999999999999999&encoding-type=xml")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		uq, err := parseUploadsQuery(q)
		if err != nil {
			return
		}
		if uq.opts.MaxUploads < 0 || uq.opts.MaxUploads > 1000 || uq.encodingType != "" && uq.encodingType != "url" ||
			uq.opts.KeyMarker == "" && uq.opts.UploadIDMarker != "" {
			t.Fatalf("%q: %+v", raw, uq)
		}
	})
}

func FuzzParseBucketsQuery(f *testing.F) {
	f.Add("prefix=a&max-buckets=3&continuation-token=YQ&bucket-region=us-east-1")
	f.Add("max-buckets=0&continuation-token=%2F%2F")
	f.Add("max-buckets=99999999999999999999&bucket-region=eu-west-1")
	g := &Gateway{opts: Options{Region: "us-east-1"}}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		bq, err := g.parseBucketsQuery(q)
		if err != nil {
			return
		}
		if bq.max < 0 || bq.max > maxBucketsPage || (q.Has("max-buckets") || q.Has("prefix")) && bq.max == 0 ||
			bq.after != "" && ops.CheckBucketName(bq.after) != nil {
			t.Fatalf("%q: %+v", raw, bq)
		}
	})
}

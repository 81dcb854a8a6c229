package s3gw

import (
	"net/url"
	"testing"
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

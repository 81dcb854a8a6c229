package s3gw

import (
	"net/http"
	"testing"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestSDKErrorStatus: an SDK error is the caller's fault (4xx, not retried)
// only when its code says so; any other (a misconfigured cluster, a code a
// newer store sends) is a 500 that clients retry.
func TestSDKErrorStatus(t *testing.T) {
	for _, c := range []struct {
		status osdpb.Status
		code   string
		want   int
	}{
		{osdpb.Status_NO_SUCH_KEY, "NoSuchKey", http.StatusNotFound},
		{osdpb.Status_INVALID_ARGUMENT, "InvalidArgument", http.StatusBadRequest},
		{osdpb.Status_ENTITY_TOO_SMALL, "EntityTooSmall", http.StatusBadRequest},
		{osdpb.Status_INVALID_KEY, "InvalidKey", http.StatusBadRequest},
		{osdpb.Status_SERVICE_UNAVAILABLE, "ServiceUnavailable", http.StatusServiceUnavailable},
		{osdpb.Status_WRONG_CLUSTER, "WrongCluster", http.StatusInternalServerError},
		{osdpb.Status_REQUEST_ID_REUSED, "RequestIdReused", http.StatusInternalServerError},
		{osdpb.Status(999), "", http.StatusInternalServerError},
	} {
		e := toS3Error(&client.Error{Status: c.status, Message: "m"})
		if e.Status != c.want || (c.code != "" && e.Code != c.code) {
			t.Errorf("status %v: %s %d, want %s %d", c.status, e.Code, e.Status, c.code, c.want)
		}
	}
}

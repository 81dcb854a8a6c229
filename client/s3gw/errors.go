package s3gw

import (
	"cmp"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"

	"github.com/ospreystore/osprey/client"
)

// Error is an S3 error: its code, HTTP status and message, as the
// gateway answers it in XML.
type Error struct {
	Code    string
	Status  int
	Message string
	// Bucket and Key, when set, name what was not found instead of the
	// request's bucket and key (a copy's source).
	Bucket, Key string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Is matches errors of the same code, so errors.Is(err, ErrNoSuchKey) works
// whatever the message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// The S3 errors the gateway answers itself; the SDK's (client.Err*) are
// mapped by code in toS3Error.
var (
	ErrAccessDenied                      = &Error{Code: "AccessDenied", Status: http.StatusForbidden}
	ErrSignatureDoesNotMatch             = &Error{Code: "SignatureDoesNotMatch", Status: http.StatusForbidden}
	ErrInvalidAccessKeyID                = &Error{Code: "InvalidAccessKeyId", Status: http.StatusForbidden}
	ErrInvalidToken                      = &Error{Code: "InvalidToken", Status: http.StatusBadRequest}
	ErrRequestTimeTooSkewed              = &Error{Code: "RequestTimeTooSkewed", Status: http.StatusForbidden}
	ErrAuthorizationHeaderMalformed      = &Error{Code: "AuthorizationHeaderMalformed", Status: http.StatusBadRequest}
	ErrAuthorizationQueryParametersError = &Error{Code: "AuthorizationQueryParametersError", Status: http.StatusBadRequest}
	ErrContentSHA256Mismatch             = &Error{Code: "XAmzContentSHA256Mismatch", Status: http.StatusBadRequest}
	ErrInvalidDigest                     = &Error{Code: "InvalidDigest", Status: http.StatusBadRequest}
	ErrBadDigest                         = &Error{Code: "BadDigest", Status: http.StatusBadRequest}
	ErrInvalidRequest                    = &Error{Code: "InvalidRequest", Status: http.StatusBadRequest}
	ErrInvalidArgument                   = &Error{Code: "InvalidArgument", Status: http.StatusBadRequest}
	ErrMalformedXML                      = &Error{Code: "MalformedXML", Status: http.StatusBadRequest}
	ErrMaxMessageLengthExceeded          = &Error{Code: "MaxMessageLengthExceeded", Status: http.StatusBadRequest}
	ErrInvalidPart                       = &Error{Code: "InvalidPart", Status: http.StatusBadRequest}
	ErrMissingContentLength              = &Error{Code: "MissingContentLength", Status: http.StatusLengthRequired}
	ErrIncompleteBody                    = &Error{Code: "IncompleteBody", Status: http.StatusBadRequest}
	ErrMetadataTooLarge                  = &Error{Code: "MetadataTooLarge", Status: http.StatusBadRequest}
	ErrEntityTooLarge                    = &Error{Code: "EntityTooLarge", Status: http.StatusBadRequest}
	ErrInvalidRange                      = &Error{Code: "InvalidRange", Status: http.StatusRequestedRangeNotSatisfiable}
	ErrNoSuchBucket                      = &Error{Code: "NoSuchBucket", Status: http.StatusNotFound}
	ErrNoSuchKey                         = &Error{Code: "NoSuchKey", Status: http.StatusNotFound}
	ErrBucketNotEmpty                    = &Error{Code: "BucketNotEmpty", Status: http.StatusConflict}
	ErrBucketAlreadyOwnedByYou           = &Error{Code: "BucketAlreadyOwnedByYou", Status: http.StatusConflict}
	ErrInvalidBucketName                 = &Error{Code: "InvalidBucketName", Status: http.StatusBadRequest}
	ErrMethodNotAllowed                  = &Error{Code: "MethodNotAllowed", Status: http.StatusMethodNotAllowed}
	ErrAccessForbidden                   = &Error{Code: "AccessForbidden", Status: http.StatusForbidden}
	ErrBadRequest                        = &Error{Code: "BadRequest", Status: http.StatusBadRequest}
	ErrNotImplemented                    = &Error{Code: "NotImplemented", Status: http.StatusNotImplemented}
	ErrInvalidStorageClass               = &Error{Code: "InvalidStorageClass", Status: http.StatusBadRequest}
	ErrInternalError                     = &Error{Code: "InternalError", Status: http.StatusInternalServerError}
	ErrServiceUnavailable                = &Error{Code: "ServiceUnavailable", Status: http.StatusServiceUnavailable}
	ErrRequestTimeout                    = &Error{Code: "RequestTimeout", Status: http.StatusBadRequest}
	ErrRequestHeaderSectionTooLarge      = &Error{Code: "RequestHeaderSectionTooLarge", Status: http.StatusBadRequest}
)

// errf is kind's error with a message.
func errf(kind *Error, format string, args ...any) *Error {
	return &Error{Code: kind.Code, Status: kind.Status, Message: fmt.Sprintf(format, args...)}
}

// sdkStatus is the HTTP status of each S3 code the SDK returns; one not
// listed (a cluster's misconfiguration, as WrongCluster, or a code a newer
// store sends) is 500, which clients retry: the caller did nothing wrong
// that we know of.
var sdkStatus = map[string]int{
	"InvalidBucketName":   http.StatusBadRequest,
	"KeyTooLongError":     http.StatusBadRequest,
	"EntityTooLarge":      http.StatusBadRequest,
	"EntityTooSmall":      http.StatusBadRequest,
	"InvalidPart":         http.StatusBadRequest,
	"InvalidPartOrder":    http.StatusBadRequest,
	"BadDigest":           http.StatusBadRequest,
	"InvalidArgument":     http.StatusBadRequest,
	"InvalidKey":          http.StatusBadRequest,
	"NoSuchEntity":        http.StatusNotFound,
	"EntityAlreadyExists": http.StatusConflict,
	"NoSuchBucket":        http.StatusNotFound,
	"NoSuchKey":           http.StatusNotFound,
	"NoSuchUpload":        http.StatusNotFound,
	"BucketNotEmpty":      http.StatusConflict,
	"BucketAlreadyExists": http.StatusConflict,
	"InvalidRange":        http.StatusRequestedRangeNotSatisfiable,
	"ServiceUnavailable":  http.StatusServiceUnavailable,
	"StorageFull":         http.StatusInsufficientStorage,
	"InternalError":       http.StatusInternalServerError,
	"StaleEpoch":          http.StatusServiceUnavailable,
	"WrongPrimary":        http.StatusServiceUnavailable,
	"NotLeader":           http.StatusServiceUnavailable,
	"PreconditionFailed":  http.StatusPreconditionFailed,
}

// defaultMessages are S3's messages of the codes that often come without
// one (the OSDs' sentinels). A message is never empty: clients parse an
// empty <Message/> as none, and the aws CLI then fails on it with a
// TypeError instead of printing the code.
var defaultMessages = map[string]string{
	"NoSuchBucket":   "The specified bucket does not exist",
	"NoSuchKey":      "The specified key does not exist.",
	"NoSuchUpload":   "The specified upload does not exist.",
	"BucketNotEmpty": "The bucket you tried to delete is not empty",
	"InvalidRange":   "The requested range is not satisfiable",
	// S3's words for a failed conditional write.
	"PreconditionFailed": "At least one of the pre-conditions you specified did not hold",
}

// toS3Error turns any error of a handler into the S3 error to answer,
// with a message.
func toS3Error(err error) *Error {
	e := s3Error(err)
	if e.Message == "" {
		e = &Error{Code: e.Code, Status: e.Status, Message: cmp.Or(defaultMessages[e.Code], e.Code)}
	}
	return e
}

// clusterRefusal reports whether err is the cluster refusing the gateway
// itself (the SDK's AccessDenied): the gateway checks its users' rights
// itself (authorize), so the cluster's refusal is of the gateway's key or
// caps.
func clusterRefusal(err error) bool {
	var ce *client.Error
	return errors.As(err, &ce) && client.ErrorCode(ce) == "AccessDenied"
}

func s3Error(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		code := client.ErrorCode(ce)
		if clusterRefusal(ce) {
			// The cluster refused the gateway itself (its key rotated
			// or removed, its caps cut): the user's own rights were
			// checked here (authorize). Not the user's doing, nor
			// theirs to read: the detail goes to the gateway's log.
			return errf(ErrServiceUnavailable, "the gateway's access to the cluster was refused; its operator must renew it (the gateway's log says why)")
		}
		if code == "BucketAlreadyExists" {
			// One owner per gateway: the bucket is the caller's. S3's
			// words, not the store's (which name our own packages).
			return errf(ErrBucketAlreadyOwnedByYou, "Your previous request to create the named bucket succeeded and you already own it.")
		}
		status, ok := sdkStatus[code]
		if !ok {
			status = http.StatusInternalServerError
		}
		return &Error{Code: code, Status: status, Message: ce.Message}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrClosed) {
		return errf(ErrServiceUnavailable, "%v", err)
	}
	return errf(ErrInternalError, "%v", err)
}

// errorBody is S3's error document.
type errorBody struct {
	XMLName xml.Name `xml:"Error"`
	Code    string
	Message xmlText
	// As AWS names what was not found: the key of a NoSuchKey, the
	// bucket of a NoSuchBucket.
	Key        xmlText `xml:",omitempty"`
	BucketName xmlText `xml:",omitempty"`
	Resource   xmlText `xml:",omitempty"`
	RequestID  string  `xml:"RequestId"`
	HostID     string  `xml:"HostId"`
}

package s3gw

import (
	"encoding/xml"
	"net/http"
)

// GetBucketAcl and GetObjectAcl answer what the gateway enforces, in S3's
// form: the caller as the owner (as ListBuckets names it), granted
// FULL_CONTROL where its caps let it write the bucket and READ where they
// only let it read. Access is the entities' caps (docs/auth.md), not ACLs,
// so there is nothing else to list; tools that read an ACL to see whether
// a bucket is there and theirs (the Java SDK v1's doesBucketExistV2,
// Hadoop's s3a with fs.s3a.bucket.probe=2) get their answer. PutBucketAcl
// and PutObjectAcl refuse a grant (NotImplemented) rather than ignore it;
// a canned ACL that changes nothing is taken (putACL).

type accessControlPolicy struct {
	XMLName xml.Name `xml:"AccessControlPolicy"`
	XMLNS   string   `xml:"xmlns,attr"`
	Owner   owner
	Grants  []grant `xml:"AccessControlList>Grant"`
}

type grant struct {
	Grantee    grantee
	Permission string
}

type grantee struct {
	XMLNSXSI    string `xml:"xmlns:xsi,attr"`
	Type        string `xml:"xsi:type,attr"`
	ID          string
	DisplayName string
}

// getACLTarget checks that the bucket, or the object, an ACL request
// names is there.
func (g *Gateway) getACLTarget(req *request) error {
	ctx := req.r.Context()
	if req.key == "" {
		_, err := g.cl.StatBucket(ctx, req.bucket)
		return err
	}
	_, err := g.cl.StatObject(ctx, req.bucket, req.key)
	return err
}

func (g *Gateway) getACL(req *request) error {
	if err := g.getACLTarget(req); err != nil {
		return err
	}
	who := ownerOf(req)
	perm := "READ"
	if req.authorize(write, req.bucket) == nil {
		perm = "FULL_CONTROL"
	}
	writeXML(req.w, http.StatusOK, accessControlPolicy{XMLNS: s3XMLNS, Owner: who, Grants: []grant{{
		Grantee:    grantee{XMLNSXSI: "http://www.w3.org/2001/XMLSchema-instance", Type: "CanonicalUser", ID: who.ID, DisplayName: who.DisplayName},
		Permission: perm}}})
	return nil
}

// putACL takes a canned ACL that changes nothing (private, the default,
// and the bucket-owner ones, which unsupportedWriteHeaders let through)
// as done, as PutObject takes them, so `s3cmd setacl --acl-private` and
// the like work; a grant, in headers or in a body, is NotImplemented.
func (g *Gateway) putACL(req *request) error {
	if req.r.Header.Get("X-Amz-Acl") == "" || req.r.ContentLength != 0 {
		return errf(ErrNotImplemented, "ACLs are not implemented: access is the entities' caps (osprey auth caps); GetBucketAcl and GetObjectAcl say what they allow")
	}
	if err := g.getACLTarget(req); err != nil {
		return err
	}
	req.w.WriteHeader(http.StatusOK)
	return nil
}

package osd

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Capabilities at the OSD (docs/auth.md). The mon pushes its auth table
// (every entity's caps and certificate serial) to the OSD's monclient;
// the OSD keeps the latest and checks against it:
//   - every session, when the messenger authenticates (msgr.AuthOptions
//     .Authorize): the peer must have a record whose serial is the
//     certificate it showed, so "auth rm" and a reissued keyring lock the
//     old certificate out; on the cluster network it must also be an OSD
//     (type osd, profile osd);
//   - every client op (opAllowed): the peer's osd caps must grant the op's
//     permission on its bucket, else ACCESS_DENIED.
//
// Ops are checked only while the OSD enforces auth (authTables.enforce),
// that is when its messengers authenticate: a name a peer merely claims is
// worth nothing to check.

// authTables holds the latest table.
type authTables struct {
	enforce bool
	auth.Keeper
	// msgrs are the OSD's messengers, once they exist: a table that
	// revokes an entity's certificate (auth rm, auth rotate) ends its
	// sessions on them (revoke), which were authenticated with it.
	msgrs atomic.Pointer[[2]*msgr.Messenger]
}

func newAuthTables() *authTables {
	a := &authTables{}
	a.OnChange = a.revoke
	return a
}

// revoke ends the sessions of the entities next revokes (auth.Revoked).
// Caps need no such end: every op is checked against the table held.
func (a *authTables) revoke(prev, next *auth.Table) {
	ms := a.msgrs.Load()
	if ms == nil || !a.enforce {
		return
	}
	for _, e := range auth.Revoked(prev, next, false) {
		for _, m := range ms {
			m.CloseSessionsOf(msgr.EntityName(e))
		}
	}
}

// note adopts t (monclient.Options.OnAuth).
func (a *authTables) note(t *osdpb.AuthTable) { a.Note(monclient.AuthTable(t)) }

// authorize is the messengers' AuthOptions.Authorize: cluster is the
// cluster network, where only OSDs may hold sessions.
func (a *authTables) authorize(cluster bool) func(context.Context, msgr.EntityName, *x509.Certificate) error {
	return func(ctx context.Context, peer msgr.EntityName, cert *x509.Certificate) error {
		r, err := a.Authenticate(ctx, string(peer), cert)
		if err != nil {
			return err
		}
		if cluster && (peer.Type() != "osd" || !r.Caps.HasProfile(auth.ServiceOSD, auth.ProfileOSD)) {
			return fmt.Errorf("%s not allowed on the cluster network (OSDs only, with osd 'allow profile osd')", peer)
		}
		return nil
	}
}

// opPerm is the permission a client op needs on its bucket.
func opPerm(t osdpb.MsgType) auth.Perm {
	switch t {
	case osdpb.MsgType_MSG_CREATE_BUCKET, osdpb.MsgType_MSG_DELETE_BUCKET, osdpb.MsgType_MSG_PUT_OBJECT,
		osdpb.MsgType_MSG_DELETE_OBJECT, osdpb.MsgType_MSG_CREATE_UPLOAD, osdpb.MsgType_MSG_UPLOAD_PART,
		osdpb.MsgType_MSG_COMPLETE_UPLOAD, osdpb.MsgType_MSG_ABORT_UPLOAD,
		osdpb.MsgType_MSG_PUT_OBJECT_IF, osdpb.MsgType_MSG_COMPLETE_UPLOAD_IF, osdpb.MsgType_MSG_DELETE_OBJECT_IF:
		return auth.PermWrite
	}
	return auth.PermRead
}

// opAllowed checks a client op of type t on bucket ("" for none: listing
// the buckets) from peer against its caps: nil, or an ACCESS_DENIED
// *ops.Error saying what is missing. Other OSDs (profile osd) may do
// every op: they forward ops on behalf of clients (bucket checks).
func (a *authTables) opAllowed(peer msgr.EntityName, t osdpb.MsgType, bucket string) *ops.Error {
	if !a.enforce {
		return nil
	}
	r, err := a.Record(string(peer))
	if err != nil {
		return ops.Errorf(osdpb.Status_ACCESS_DENIED, "%v", err)
	}
	want := opPerm(t)
	if r.Caps.Allows(auth.ServiceOSD, want, bucket) {
		return nil
	}
	if t == osdpb.MsgType_MSG_LIST_BUCKETS && r.Caps.AllowsSome(auth.ServiceOSD, auth.PermRead) {
		// As S3's ListBuckets: a client that may read some bucket lists
		// the buckets it may read (bucketRead filters the reply).
		return nil
	}
	what := "the bucket list"
	if bucket != "" {
		what = "bucket " + bucket
	}
	verb := "read"
	if want == auth.PermWrite {
		verb = "write"
	}
	return ops.Errorf(osdpb.Status_ACCESS_DENIED, "%s may not %s %s (its caps: %s)", peer, verb, what, auth.FormatCaps(r.Caps.Strings()))
}

// hiddenAllowed checks a client op of type t on the multipart bucket,
// whose objects belong to the users' buckets (docs/auth.md): key is the
// object's key, or with list a listing's prefix. Caps that cover the
// multipart bucket itself (an admin's, a gateway's, an OSD's) may do
// anything there. Otherwise:
//   - an upload's record "BUCKET/KEY/ID", and a listing under "BUCKET/",
//     are BUCKET's, checked on it;
//   - a part or piece "ID/..." names no bucket in its key: its metadata
//     does (ObjectMeta.upload_bucket), which the OSD has only once it
//     reads it. Reading one, or listing "ID/", takes read on some bucket
//     here (byUpload), and then read on the part's own bucket as it is
//     read (partReadable): a get or head of a part of another's bucket
//     is refused, and a listing shows only the parts and pieces of
//     buckets the caller may read, whatever else its prefix matches. So
//     an upload id is no capability: a reader whose caps on a bucket were
//     taken away reads none of its objects' parts, though their heads
//     named them. Writing or deleting one takes caps that cover the
//     multipart bucket: a user writes its parts with UPLOAD_PART, checked
//     on the upload's bucket;
//   - a put takes caps that cover the multipart bucket, whatever the key.
func (a *authTables) hiddenAllowed(peer msgr.EntityName, t osdpb.MsgType, key string, list bool) (byUpload bool, _ *ops.Error) {
	err := a.opAllowed(peer, t, ops.MultipartBucket)
	if err == nil || t == osdpb.MsgType_MSG_PUT_OBJECT || t == osdpb.MsgType_MSG_PUT_OBJECT_IF {
		// Nobody else puts a hidden object: a record made by hand could
		// name another upload's id, whose parts UPLOAD_PART would then
		// let its maker replace.
		return false, err
	}
	first, _, cut := strings.Cut(key, "/")
	bucket := ""
	if list && cut && ops.CheckBucketName(first) == nil {
		bucket = first
	} else if b, _, _, ok := ops.ParseUploadKey(key); !list && ok {
		bucket = b
	}
	if bucket != "" {
		berr := a.opAllowed(peer, t, bucket)
		if berr == nil {
			return false, nil
		}
		err = berr // says what the caller lacks on its own bucket
	}
	part := list && cut && ops.CheckUploadID(first) == nil || !list && ops.IsPartOrPiece(key)
	if part && opPerm(t) == auth.PermRead {
		if r, rerr := a.Record(string(peer)); rerr == nil && r.Caps.AllowsSome(auth.ServiceOSD, auth.PermRead) {
			return true, nil
		}
	}
	return false, err
}

// partReadable checks a read of a part or piece (its metadata meta) by
// peer, which hiddenAllowed let through by its upload id (byUpload): peer
// must be allowed to read the part's bucket. A part written before OSDs
// recorded its bucket (no upload_bucket) is read as before, by upload id
// alone.
// (An error, not an *ops.Error: its callers keep it in an error, where a
// nil *ops.Error would not be nil.)
func (a *authTables) partReadable(peer msgr.EntityName, meta *osdpb.ObjectMeta) error {
	b := meta.GetUploadBucket()
	if b == "" || a.opAllowed(peer, osdpb.MsgType_MSG_GET_OBJECT, b) == nil {
		return nil
	}
	// Not the bucket's name: an upload id is all the caller showed.
	return ops.Errorf(osdpb.Status_ACCESS_DENIED, "%s may not read this upload's parts: they are its bucket's, which its caps do not cover", peer)
}

// manifestAllowed checks a put of type t whose metadata names parts (a
// multipart manifest): only caps that cover the multipart bucket may send
// one (the S3 gateway's and the SDK's puts name none). A user's manifests
// come from COMPLETE_UPLOAD, which takes only its own upload's parts; one
// made by hand could name another bucket's parts, serve them through an
// object of its own (past partReadable: the OSD reads parts for readers of
// the manifest's bucket), and have them deleted when it is overwritten.
func (a *authTables) manifestAllowed(peer msgr.EntityName, t osdpb.MsgType) *ops.Error {
	if a.opAllowed(peer, t, ops.MultipartBucket) == nil {
		return nil
	}
	return ops.Errorf(osdpb.Status_ACCESS_DENIED, "%s may not put an object that names parts (a multipart manifest): complete a multipart upload instead", peer)
}

// adminAllowed checks an admin-only request (what: "scrub") from peer:
// only an entity that may change the map (mon 'allow *', as
// client.admin) may make one.
func (a *authTables) adminAllowed(peer msgr.EntityName, what string) *ops.Error {
	if !a.enforce {
		return nil
	}
	r, err := a.Record(string(peer))
	if err != nil {
		return ops.Errorf(osdpb.Status_ACCESS_DENIED, "%v", err)
	}
	if r.Caps.Allows(auth.ServiceMon, auth.PermWrite, "") {
		return nil
	}
	return ops.Errorf(osdpb.Status_ACCESS_DENIED, "%s may not %s: admins only, with mon caps that allow writes (its caps: %s)", peer, what, auth.FormatCaps(r.Caps.Strings()))
}

package osd

import (
	"context"
	"crypto/x509"
	"errors"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
)

func TestAuthzOps(t *testing.T) {
	a := &authTables{enforce: true}
	if err := a.opAllowed("client.x", osdpb.MsgType_MSG_GET_OBJECT, "b"); err == nil || err.Status != osdpb.Status_ACCESS_DENIED {
		t.Fatalf("before any table: %v", err)
	}
	a.note(&osdpb.AuthTable{Revision: 3, Entries: []*osdpb.AuthEntry{
		{Entity: "client.ro", Caps: map[string]string{"osd": "allow r"}},
		{Entity: "client.photos", Caps: map[string]string{"osd": "allow rw bucket=photos"}},
		{Entity: "osd.1", Caps: map[string]string{"mon": "allow profile osd", "osd": "allow profile osd"}},
		{Entity: "client.bad", Caps: map[string]string{"osd": "allow q"}}, // damaged: no caps at all
	}})
	for _, tc := range []struct {
		peer   string
		t      osdpb.MsgType
		bucket string
		ok     bool
	}{
		{"client.ro", osdpb.MsgType_MSG_GET_OBJECT, "any", true},
		{"client.ro", osdpb.MsgType_MSG_LIST_BUCKETS, "", true},
		{"client.ro", osdpb.MsgType_MSG_PUT_OBJECT, "any", false},
		{"client.ro", osdpb.MsgType_MSG_DELETE_BUCKET, "any", false},
		{"client.ro", osdpb.MsgType_MSG_UPLOAD_PART, "any", false},
		{"client.photos", osdpb.MsgType_MSG_PUT_OBJECT, "photos", true},
		{"client.photos", osdpb.MsgType_MSG_COMPLETE_UPLOAD, "photos", true},
		{"client.photos", osdpb.MsgType_MSG_PUT_OBJECT, "other", false},
		{"client.photos", osdpb.MsgType_MSG_LIST_BUCKETS, "", true}, // its buckets only (bucketRead)
		{"client.bad", osdpb.MsgType_MSG_LIST_BUCKETS, "", false},
		{"osd.1", osdpb.MsgType_MSG_LIST_OBJECTS, "any", true},
		{"osd.1", osdpb.MsgType_MSG_DELETE_OBJECT, "any", true},
		{"client.bad", osdpb.MsgType_MSG_GET_OBJECT, "any", false},
		{"client.nobody", osdpb.MsgType_MSG_GET_OBJECT, "any", false},
	} {
		err := a.opAllowed(msgrName(tc.peer), tc.t, tc.bucket)
		if (err == nil) != tc.ok || (err != nil && err.Status != osdpb.Status_ACCESS_DENIED) {
			t.Errorf("%s %v %q: %v, want allowed=%v", tc.peer, tc.t, tc.bucket, err, tc.ok)
		}
	}
	err := a.opAllowed("client.photos", osdpb.MsgType_MSG_PUT_OBJECT, "other")
	if !strings.Contains(err.Message, "client.photos may not write bucket other (its caps: osd 'allow rw bucket=photos')") {
		t.Fatalf("message: %q", err.Message)
	}
	// Not enforcing: everything goes (the messenger did not authenticate).
	a.enforce = false
	if err := a.opAllowed("client.nobody", osdpb.MsgType_MSG_PUT_OBJECT, "b"); err != nil {
		t.Fatal(err)
	}
}

// TestAuthzHidden: the multipart bucket's objects are their buckets'
// (authTables.hiddenAllowed). A user whose caps name its bucket reads and
// writes its uploads' records and lists them, is let through to the parts
// and pieces of an upload id (byUpload: partReadable checks each one's
// bucket as it is read), and may not delete or write one, nor list the
// whole bucket; caps that cover every bucket may do anything there.
func TestAuthzHidden(t *testing.T) {
	a := &authTables{enforce: true}
	a.note(&osdpb.AuthTable{Revision: 1, Entries: []*osdpb.AuthEntry{
		{Entity: "client.admin", Caps: map[string]string{"osd": "allow *"}},
		{Entity: "client.photos", Caps: map[string]string{"osd": "allow rw bucket=photos"}},
		{Entity: "client.wo", Caps: map[string]string{"osd": "allow w bucket=photos"}},
		{Entity: "client.mon", Caps: map[string]string{"mon": "allow r"}},
	}})
	id := ops.NewUploadID()
	rec, part, piece := ops.UploadKey("photos", "a/b", id), ops.PartKey(id, 3), ops.PieceKey(id, 3, ops.NewPieceSet(), 1)
	get, del, list := osdpb.MsgType_MSG_GET_OBJECT, osdpb.MsgType_MSG_DELETE_OBJECT, osdpb.MsgType_MSG_LIST_OBJECTS
	for _, tc := range []struct {
		peer         string
		t            osdpb.MsgType
		key          string
		list         bool
		ok, byUpload bool
	}{
		{"client.admin", del, part, false, true, false},
		{"client.admin", list, "", true, true, false},
		{"client.photos", osdpb.MsgType_MSG_HEAD_OBJECT, rec, false, true, false},
		{"client.photos", del, rec, false, true, false},
		{"client.photos", osdpb.MsgType_MSG_PUT_OBJECT, rec, false, false, false},
		{"client.photos", osdpb.MsgType_MSG_PUT_OBJECT_IF, part, false, false, false},
		{"client.admin", osdpb.MsgType_MSG_PUT_OBJECT, rec, false, true, false},
		{"client.photos", get, ops.UploadKey("other", "k", id), false, false, false},
		{"client.photos", list, "photos/", true, true, false},
		{"client.photos", list, "photos/a/", true, true, false},
		{"client.photos", list, "other/", true, false, false},
		{"client.photos", list, "", true, false, false},
		{"client.photos", get, part, false, true, true},
		{"client.photos", get, piece, false, true, true},
		{"client.photos", osdpb.MsgType_MSG_HEAD_OBJECT, part, false, true, true},
		{"client.photos", list, id + "/", true, true, true},
		{"client.photos", del, part, false, false, false},
		{"client.photos", del, piece, false, false, false},
		{"client.photos", get, "not/a/hidden/key", false, false, false},
		{"client.wo", get, part, false, false, false},
		{"client.wo", list, "photos/", true, false, false},
		{"client.wo", del, rec, false, true, false},
		{"client.mon", get, part, false, false, false},
		{"client.nobody", get, part, false, false, false},
	} {
		byUpload, err := a.hiddenAllowed(msgrName(tc.peer), tc.t, tc.key, tc.list)
		if (err == nil) != tc.ok || byUpload != tc.byUpload || (err != nil && err.Status != osdpb.Status_ACCESS_DENIED) {
			t.Errorf("%s %v %q: byUpload %v, %v; want allowed=%v byUpload=%v", tc.peer, tc.t, tc.key, byUpload, err, tc.ok, tc.byUpload)
		}
	}
	// A refusal on the user's own bucket says what it lacks there.
	_, err := a.hiddenAllowed("client.wo", get, rec, false)
	if err == nil || !strings.Contains(err.Message, "client.wo may not read bucket photos") {
		t.Fatalf("message: %v", err)
	}
}

// TestAuthzPartReadable: a part let through by its upload id is read only
// by a reader of the bucket its metadata names; one written before parts
// named their bucket is read by upload id alone, and nothing is checked
// while the OSD does not enforce auth.
func TestAuthzPartReadable(t *testing.T) {
	a := &authTables{enforce: true}
	a.note(&osdpb.AuthTable{Revision: 1, Entries: []*osdpb.AuthEntry{
		{Entity: "client.photos", Caps: map[string]string{"osd": "allow rw bucket=photos"}},
		{Entity: "client.other", Caps: map[string]string{"osd": "allow r bucket=other"}},
		{Entity: "client.wo", Caps: map[string]string{"osd": "allow w bucket=photos"}},
	}})
	photos := &osdpb.ObjectMeta{Size: 1, UploadBucket: "photos"}
	old := &osdpb.ObjectMeta{Size: 1}
	for _, tc := range []struct {
		peer string
		meta *osdpb.ObjectMeta
		ok   bool
	}{
		{"client.photos", photos, true},
		{"client.other", photos, false},
		{"client.wo", photos, false},
		{"client.gone", photos, false},
		{"client.other", old, true},
	} {
		err := a.partReadable(msgrName(tc.peer), tc.meta)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ops.ErrAccessDenied) {
			t.Errorf("%s reads a part of %q: %v, want allowed=%v", tc.peer, tc.meta.UploadBucket, err, tc.ok)
		}
	}
	// The refusal does not name the bucket: the upload id is all the
	// caller showed.
	if err := a.partReadable("client.other", photos); err == nil || strings.Contains(err.Error(), "photos") {
		t.Fatalf("refusal: %v", err)
	}
	// A manifest by hand: caps that cover every bucket only.
	a.note(&osdpb.AuthTable{Revision: 2, Entries: []*osdpb.AuthEntry{
		{Entity: "client.photos", Caps: map[string]string{"osd": "allow rw bucket=photos"}},
		{Entity: "client.admin", Caps: map[string]string{"osd": "allow *"}},
	}})
	if err := a.manifestAllowed("client.photos", osdpb.MsgType_MSG_PUT_OBJECT); err == nil || err.Status != osdpb.Status_ACCESS_DENIED {
		t.Fatalf("a user's manifest: %v", err)
	}
	if err := a.manifestAllowed("client.admin", osdpb.MsgType_MSG_PUT_OBJECT_IF); err != nil {
		t.Fatalf("an admin's manifest: %v", err)
	}
	a.enforce = false
	if err := a.partReadable("client.other", photos); err != nil {
		t.Fatalf("not enforcing: %v", err)
	}
}

func TestAuthzSessions(t *testing.T) {
	ca, err := auth.NewCA("t")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string) *auth.Keyring {
		k, err := ca.Issue(name)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	osd1, cli, old := issue("osd.1"), issue("client.x"), issue("client.x")
	a := &authTables{enforce: true}
	a.note(&osdpb.AuthTable{Revision: 1, Entries: []*osdpb.AuthEntry{
		{Entity: "osd.1", Caps: map[string]string{"osd": "allow profile osd"}, Serial: auth.Serial(osd1.Cert)},
		{Entity: "client.x", Caps: map[string]string{"osd": "allow *"}, Serial: auth.Serial(cli.Cert)},
	}})
	ctx := context.Background()
	public, cluster := a.authorize(false), a.authorize(true)
	for _, tc := range []struct {
		az   func(context.Context, msgr.EntityName, *x509.Certificate) error
		peer string
		k    *auth.Keyring
		want string // "" for allowed
	}{
		{public, "client.x", cli, ""},
		{public, "osd.1", osd1, ""},
		{cluster, "osd.1", osd1, ""},
		{cluster, "client.x", cli, "not allowed on the cluster network"},
		{public, "client.x", old, "which is not its current one"},
		{public, "client.y", issue("client.y"), "has no auth record"},
	} {
		err := tc.az(ctx, msgrName(tc.peer), tc.k.Cert)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.peer, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.peer, err, tc.want)
		}
	}
	// The refusal of an old certificate does not tell its holder the
	// current one's serial.
	if err := public(ctx, "client.x", old.Cert); err == nil || strings.Contains(err.Error(), auth.Serial(cli.Cert)) {
		t.Fatalf("an old certificate's refusal: %v", err)
	}
	// auth rm reaches the OSD as a table without the entity.
	a.note(&osdpb.AuthTable{Revision: 2, Entries: []*osdpb.AuthEntry{
		{Entity: "osd.1", Caps: map[string]string{"osd": "allow profile osd"}, Serial: auth.Serial(osd1.Cert)},
	}})
	if err := public(ctx, "client.x", cli.Cert); err == nil {
		t.Fatal("a removed entity still holds sessions")
	}
}

func msgrName(s string) msgr.EntityName { return msgr.EntityName(s) }

// TestAuthzAdmin: an admin-only request (a scrub) is allowed to entities
// whose mon caps allow writes, and to nobody else, whatever its osd caps.
func TestAuthzAdmin(t *testing.T) {
	a := &authTables{enforce: true}
	a.note(&osdpb.AuthTable{Revision: 1, Entries: []*osdpb.AuthEntry{
		{Entity: "client.admin", Caps: map[string]string{"mon": "allow *", "osd": "allow *"}},
		{Entity: "client.rw", Caps: map[string]string{"mon": "allow r", "osd": "allow *"}},
		{Entity: "osd.1", Caps: map[string]string{"mon": "allow profile osd", "osd": "allow profile osd"}},
	}})
	for peer, ok := range map[string]bool{"client.admin": true, "client.rw": false, "osd.1": false, "client.nobody": false} {
		err := a.adminAllowed(msgrName(peer), "scrub")
		if (err == nil) != ok || (err != nil && err.Status != osdpb.Status_ACCESS_DENIED) {
			t.Errorf("%s: %v, want allowed=%v", peer, err, ok)
		}
	}
	if err := a.adminAllowed("client.rw", "scrub"); !strings.Contains(err.Message, "client.rw may not scrub: admins only") {
		t.Fatalf("message: %q", err.Message)
	}
}

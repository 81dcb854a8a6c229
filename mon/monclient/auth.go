package monclient

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// AuthTable converts the mon's auth table to the form daemons check
// their peers and ops against. An entry whose caps do not parse gets
// none: the mon writes only caps that parse, so that is damage, and
// refusing is the safe side.
func AuthTable(t *osdpb.AuthTable) *auth.Table {
	recs := make(map[string]auth.Record, len(t.GetEntries()))
	for _, e := range t.GetEntries() {
		caps, err := auth.ParseCaps(e.Caps)
		if err != nil {
			caps = nil
		}
		var s3 []auth.S3Key
		for _, k := range e.S3Keys {
			s3 = append(s3, auth.S3Key{AccessKey: k.AccessKey, Secret: k.Secret})
		}
		recs[e.Entity] = auth.Record{Caps: caps, Serial: e.Serial, S3Keys: s3}
	}
	return auth.NewTable(t.GetRevision(), recs)
}

// FetchAuth asks a mon for its current auth table (as a subscription
// does), hands it to OnAuth if it is newer, and returns it. It is
// auth.Keeper's Refresh for a daemon whose peer is not in the table it
// holds yet.
func (c *Client) FetchAuth(ctx context.Context) (*auth.Table, error) {
	var rep osdpb.MonSubscribeReply
	if _, err := c.call(ctx, osdpb.MsgType_MSG_MON_SUBSCRIBE, func() proto.Message {
		have := uint64(0)
		if mp := c.Map(); mp != nil {
			have = mp.Epoch()
		}
		return &osdpb.MonSubscribe{HaveEpoch: have, Auth: true}
	}, &rep, true); err != nil {
		return nil, err
	}
	c.noteMap(rep.Map)
	c.noteAuth(rep.Auth)
	return AuthTable(rep.Auth), nil
}

// AuthorizeTypes is an msgr.AuthOptions.Authorize for a client: the peer
// it dialed must be a daemon of one of types (a mon, an OSD), so a stolen
// client key cannot pose as the cluster to other clients.
func AuthorizeTypes(types ...string) func(context.Context, msgr.EntityName, *x509.Certificate) error {
	return func(_ context.Context, peer msgr.EntityName, _ *x509.Certificate) error {
		if !slices.Contains(types, peer.Type()) {
			return fmt.Errorf("%s is not a %s", peer, strings.Join(types, " or "))
		}
		return nil
	}
}

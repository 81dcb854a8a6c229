package mon

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// Authentication and capabilities at the mon (docs/auth.md). Unless
// Config.NoAuth, the mon's messenger authenticates every session with the
// keyring of its own entity, mon.NAME, which it issues itself from the CA
// in etcd: a peer must show a certificate that the cluster's CA signed and
// that its entity's record names. Every request is then checked against
// the peer's mon caps:
//   - the map, status and the OSD tree: r;
//   - auth commands: x;
//   - "osd create": x, or profile bootstrap-osd: it issues a new OSD's
//     key, an auth command (Ceph's "osd new" with a key needs auth caps),
//     and that key reads and writes every object;
//   - every other command (map changes): w;
//   - the auth table: x, profile osd, or profile s3-gateway (which alone
//     with x gets the S3 secrets in it, s3keys.go);
//   - boot, beacons, failure reports and mark-me-down: profile osd, and
//     only for the OSD the peer is (osd.3 cannot boot, beacon or ask to be
//     marked down as osd.5).

// monCaps are the mon's own: it may do everything.
var monCaps = map[string]string{auth.ServiceMon: "allow *", auth.ServiceOSD: "allow *"}

// OSDCaps are the caps the mon gives an OSD's entity when it creates it
// (osd create by a bootstrap key).
var OSDCaps = map[string]string{auth.ServiceMon: "allow profile osd", auth.ServiceOSD: "allow profile osd"}

// BootstrapOSDCaps are those of the key a new OSD starts with
// (client.bootstrap-osd).
var BootstrapOSDCaps = map[string]string{auth.ServiceMon: "allow profile bootstrap-osd"}

// AdminCaps are client.admin's.
var AdminCaps = map[string]string{auth.ServiceMon: "allow *", auth.ServiceOSD: "allow *"}

// revokeDelay is how long after an auth change the mon ends the sessions
// it revokes (startAuth): time for the reply to the command that made it.
const revokeDelay = 2 * time.Second

// startAuth issues the mon's own keyring and makes the messenger's auth
// options, with the keeper that checks peers.
func (m *Mon) startAuth(ctx context.Context) (*msgr.AuthOptions, error) {
	pem, err := m.GetOrCreateKeyring(ctx, "mon."+m.cfg.Name, monCaps)
	if err != nil {
		return nil, fmt.Errorf("mon: its own keyring: %w", err)
	}
	k, err := auth.ParseKeyring(pem)
	if err != nil {
		return nil, fmt.Errorf("mon: its own keyring: %w", err)
	}
	// A session lives on after its credential is revoked unless ended:
	// end those of entities removed or reissued, and of those whose caps
	// changed, whose map subscriptions were allowed by the old caps
	// (Revoked). They may connect again as the table now allows.
	m.keeper.OnChange = func(prev, next *auth.Table) {
		if m.ms == nil {
			return // the mon's own keyring, before its messenger
		}
		revoked := auth.Revoked(prev, next, true)
		if len(revoked) == 0 {
			return
		}
		// A moment later: the entity may be the one whose command made
		// the change (auth rotate of its own key), whose reply, the new
		// keyring, goes out on the session this would end.
		time.AfterFunc(revokeDelay, func() {
			for _, e := range revoked {
				if n := m.ms.CloseSessionsOf(msgr.EntityName(e)); n > 0 {
					m.log.Info("ended the sessions of an entity whose credential or caps changed", "entity", e, "sessions", n)
				}
			}
		})
	}
	// A peer created a moment ago may not be in the watched table yet: ask
	// etcd (the mon's own store) before refusing it.
	m.keeper.Refresh = func(ctx context.Context) (*auth.Table, error) {
		t, err := m.auth.listTable(ctx)
		if err != nil {
			return nil, err
		}
		m.adoptAuthTable(t)
		return monclient.AuthTable(t), nil
	}
	return &msgr.AuthOptions{Keyring: k, Authorize: func(ctx context.Context, peer msgr.EntityName, cert *x509.Certificate) error {
		_, err := m.keeper.Authenticate(ctx, string(peer), cert)
		return err
	}}, nil
}

// allowed checks req from conn's peer against its mon caps: nil, or an
// ACCESS_DENIED *ops.Error that says what is missing.
func (m *Mon) allowed(conn *msgr.Conn, req proto.Message) error {
	if m.cfg.NoAuth {
		return nil
	}
	peer := conn.Peer()
	rec, err := m.keeper.Record(string(peer))
	if err != nil {
		return ops.Errorf(osdpb.Status_ACCESS_DENIED, "%v", err)
	}
	caps := rec.Caps
	need := func(p auth.Perm, what string) error {
		if caps.Allows(auth.ServiceMon, p, "") {
			return nil
		}
		return ops.Errorf(osdpb.Status_ACCESS_DENIED, "%s may not %s (needs mon '%s'; its caps: %s)", peer, what, "allow "+p.String(), auth.FormatCaps(caps.Strings()))
	}
	osdSelf := func(id uint32, what string) error {
		if !caps.HasProfile(auth.ServiceMon, auth.ProfileOSD) {
			return ops.Errorf(osdpb.Status_ACCESS_DENIED, "%s may not %s (needs mon 'allow profile osd')", peer, what)
		}
		if n, ok := ops.ParseOSDName(string(peer)); !ok || n != id {
			return ops.Errorf(osdpb.Status_ACCESS_DENIED, "%s may not %s for osd.%d", peer, what, id)
		}
		return nil
	}
	switch r := req.(type) {
	case *osdpb.GetMap:
		return need(auth.PermRead, "read the map")
	case *osdpb.MonSubscribe:
		if r.Auth && !caps.HasProfile(auth.ServiceMon, auth.ProfileOSD) && !caps.HasProfile(auth.ServiceMon, auth.ProfileS3Gateway) {
			return need(auth.PermExec, "subscribe to the auth table")
		}
		return need(auth.PermRead, "subscribe to the map")
	case *osdpb.MonBoot:
		return osdSelf(r.Id, "boot")
	case *osdpb.MonBeacon:
		return osdSelf(r.Id, "send beacons")
	case *osdpb.MonFailure:
		return osdSelf(r.Reporter, "report failures")
	case *osdpb.MonMarkMeDown:
		return osdSelf(r.Id, "ask to be marked down")
	case *osdpb.MonCommand:
		switch {
		case slices.Contains(monclient.ReadCommands, r.Prefix):
			return need(auth.PermRead, "run "+r.Prefix)
		case strings.HasPrefix(r.Prefix, "auth "):
			return need(auth.PermExec, "run "+r.Prefix)
		case r.Prefix == "osd create":
			if caps.HasProfile(auth.ServiceMon, auth.ProfileBootstrapOSD) {
				return nil
			}
			return need(auth.PermExec, "run osd create (it issues the new OSD's key)")
		}
		return need(auth.PermWrite, "run "+r.Prefix)
	}
	return ops.Errorf(osdpb.Status_ACCESS_DENIED, "%s: %T is not a request the mon checks", peer, req)
}

// osdKeyring gives the keyring of an OSD that "osd create" found in the
// map by its uuid (a repeat of the create that made it, which made its
// entity in the same transaction): the entity is found, or made again
// (caps OSDCaps) if it is gone.
func (m *Mon) osdKeyring(ctx context.Context, id uint32) ([]byte, error) {
	if m.cfg.NoAuth {
		return nil, nil
	}
	return m.GetOrCreateKeyring(ctx, fmt.Sprintf("osd.%d", id), OSDCaps)
}

package s3gw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Who may do what. An access key belongs to an identity: with
// ClusterCredentials, an Osprey entity ("osprey auth s3-key add"), whose
// osd caps decide every request before the gateway does it, as an OSD
// would decide the entity's own ops: r for reads (GET, HEAD, listings),
// w for writes (PUT, DELETE, multipart uploads, bucket creation), per
// bucket where the caps name buckets. The gateway's own entity may do
// everything (profile s3-gateway), so this check is what keeps a
// read-only user read-only. Unsigned requests are refused: no bucket
// allows anonymous access.

// Credentials find who signs with an access key.
type Credentials interface {
	// Lookup returns the identity behind accessKey, or an error: an S3
	// error (*Error) such as ErrInvalidAccessKeyID, or another that the
	// gateway answers as InternalError.
	Lookup(ctx context.Context, accessKey string) (Identity, error)
}

// Identity is the owner of an access key.
type Identity struct {
	// Secret is the key's secret, which signatures are checked with.
	Secret string
	// Entity is the Osprey entity the key belongs to ("" for a static
	// key): the owner S3 listings show, and the access log's user.
	Entity string
	// Caps are what its requests may do (the osd service's grants).
	Caps auth.Caps
}

// allowAll are a static key's caps: without a cluster's entities there
// is no one else to ask.
var allowAll = auth.Caps{auth.ServiceOSD: {{Perm: auth.PermAll}}}

// StaticCredentials maps access keys to their secrets, each allowed
// everything the gateway's own client may do. It is for clusters without
// auth (osprey up --auth none), which have no entities to hold keys.
type StaticCredentials map[string]string

// Lookup implements Credentials.
func (s StaticCredentials) Lookup(_ context.Context, accessKey string) (Identity, error) {
	secret, ok := s[accessKey]
	if !ok {
		return Identity{}, errf(ErrInvalidAccessKeyID, "the access key %q does not exist", accessKey)
	}
	return Identity{Secret: secret, Caps: allowAll}, nil
}

// KeeperCredentials find access keys in the auth table a Keeper holds
// (an S3 gateway's, with the secrets in it), refreshing it from the mon
// on a miss, so that a key made a moment ago works at once; a key
// removed stops working when the mon's push of the change arrives.
type KeeperCredentials struct{ Keeper *auth.Keeper }

// Lookup implements Credentials.
func (k KeeperCredentials) Lookup(ctx context.Context, accessKey string) (Identity, error) {
	id, err := k.Keeper.S3Key(ctx, accessKey)
	if errors.Is(err, auth.ErrNoS3Key) {
		return Identity{}, errf(ErrInvalidAccessKeyID, "the access key %q does not exist", accessKey)
	}
	if errors.Is(err, auth.ErrTableUnavailable) {
		// The mons could not be asked (out of reach, or refusing the
		// gateway's own entity): the key may well exist. Not the user's
		// doing, nor theirs to read: the cause goes to the gateway's log.
		return Identity{}, fmt.Errorf("%w: %w", errf(ErrServiceUnavailable, "the gateway could not check the access key with the cluster; its operator must look at its log"), err)
	}
	if err != nil {
		return Identity{}, err
	}
	return Identity{Secret: id.Secret, Entity: id.Entity, Caps: id.Caps}, nil
}

// ClusterCredentials are KeeperCredentials fed by a subscription to the
// mons' auth table, as the gateway's own entity, which must have mon
// 'allow profile s3-gateway' (or 'allow *') to receive the secrets.
type ClusterCredentials struct {
	KeeperCredentials
	mc *monclient.Client
}

// ClusterCredentialsOptions configure NewClusterCredentials.
type ClusterCredentialsOptions struct {
	// Mon are the mons' addresses; required.
	Mon []string
	// Keyring is the gateway's entity's; required.
	Keyring *auth.Keyring
	// Modes are the connection modes the gateway offers the mons
	// (msgr.AuthOptions.Modes); nil: crc.
	Modes []msgr.Mode
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// refreshSpacing is the least time between two refreshes a miss makes:
// a flood of requests with unknown keys costs the mon at most so many
// table reads.
const refreshSpacing = 100 * time.Millisecond

// SetKeyring has the subscription authenticate with the gateway's rotated
// keyring (monclient.Client.SetKeyring).
func (c *ClusterCredentials) SetKeyring(k *auth.Keyring) error { return c.mc.SetKeyring(k) }

// NewClusterCredentials subscribes to the mons' auth table and returns
// once it holds one; Close ends the subscription.
func NewClusterCredentials(ctx context.Context, o ClusterCredentialsOptions) (*ClusterCredentials, error) {
	if o.Keyring == nil {
		return nil, errors.New("s3gw: ClusterCredentials need the gateway's keyring")
	}
	k := &auth.Keeper{MinRefreshInterval: refreshSpacing}
	mc, err := monclient.New(ctx, monclient.Options{Addrs: o.Mon, Keyring: o.Keyring, Modes: o.Modes, Logger: o.Logger,
		OnAuth: func(t *osdpb.AuthTable) { k.Note(monclient.AuthTable(t)) }})
	if err != nil {
		return nil, err
	}
	k.Refresh = mc.FetchAuth
	// One fetch first: a refusal (the entity lacks the profile) is an
	// answer, where the subscription would retry until ctx ends.
	_, err = mc.FetchAuth(ctx)
	if err == nil {
		_, err = mc.Subscribe(ctx)
	}
	if err != nil {
		mc.Close()
		return nil, fmt.Errorf("s3gw: the auth table from the mons (the gateway's entity needs mon 'allow profile %s'): %w", auth.ProfileS3Gateway, err)
	}
	return &ClusterCredentials{KeeperCredentials: KeeperCredentials{Keeper: k}, mc: mc}, nil
}

// Close ends the subscription.
func (c *ClusterCredentials) Close() error { return c.mc.Close() }

// authorize refuses req unless its identity's caps allow perm on bucket.
func (req *request) authorize(perm auth.Perm, bucket string) error {
	if req.who.Caps.Allows(auth.ServiceOSD, perm, bucket) {
		return nil
	}
	what := map[auth.Perm]string{auth.PermRead: "read", auth.PermWrite: "write"}[perm]
	return errf(ErrAccessDenied, "%s may not %s bucket %q (its caps: %s)", req.user(), what, bucket, req.who.Caps)
}

// user names req's identity: its entity, or a static key.
func (req *request) user() string {
	if req.who.Entity != "" {
		return req.who.Entity
	}
	return "access key " + req.access
}

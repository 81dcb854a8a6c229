package auth

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrInvalidCaps: capabilities that do not parse.
var ErrInvalidCaps = errors.New("auth: invalid caps")

// Perm is a set of permissions.
type Perm uint8

const (
	// PermRead: the mon's map and status; an OSD's objects and listings.
	PermRead Perm = 1 << iota
	// PermWrite: changes to the map; puts and deletes of objects and
	// buckets.
	PermWrite
	// PermExec: administration beyond data: the mon's auth commands.
	PermExec
	// PermAll is what "allow *" grants.
	PermAll = PermRead | PermWrite | PermExec
)

func (p Perm) String() string {
	if p == PermAll {
		return "*"
	}
	var b strings.Builder
	for _, x := range []struct {
		p Perm
		c byte
	}{{PermRead, 'r'}, {PermWrite, 'w'}, {PermExec, 'x'}} {
		if p&x.p != 0 {
			b.WriteByte(x.c)
		}
	}
	return b.String()
}

// Services that take capabilities.
const (
	ServiceMon = "mon"
	ServiceOSD = "osd"
)

// ProfileOSD is the profile of OSD daemons: on the mon, boot, beacons,
// failure reports and the map; on the OSDs, the cluster network
// (replication, peering, recovery) and every object.
const ProfileOSD = "osd"

// ProfileBootstrapOSD is the mon profile of the key a new OSD starts with,
// as Ceph's client.bootstrap-osd: it may only ask the mon for an OSD id
// ("osd create" with the OSD's uuid) and receive that OSD's own keyring.
// It reads no map and no object.
const ProfileBootstrapOSD = "bootstrap-osd"

// ProfileS3Gateway is the profile of an S3 gateway (osprey s3): on the
// mon, the map and the auth table with every entity's S3 secrets, which
// it verifies signatures with; on the OSDs, every object, read and
// written on behalf of the S3 users it authenticated, whose own caps it
// checks before each request (a gateway must never lend its rights).
const ProfileS3Gateway = "s3-gateway"

// Grant is one "allow" clause of a service's capabilities.
type Grant struct {
	Perm    Perm
	Profile string // "allow profile NAME": the permissions of a kind of daemon
	// Bucket or BucketPrefix, on the osd service, limits the grant to one
	// bucket, or to the buckets whose names start so.
	Bucket, BucketPrefix string
}

func (g Grant) String() string {
	if g.Profile != "" {
		return "allow profile " + g.Profile
	}
	s := "allow " + g.Perm.String()
	switch {
	case g.Bucket != "":
		s += " bucket=" + g.Bucket
	case g.BucketPrefix != "":
		s += " bucket_prefix=" + g.BucketPrefix
	}
	return s
}

// covers reports whether g applies to bucket ("" for an op that names
// none, such as listing the buckets: only grants without a bucket apply).
func (g Grant) covers(bucket string) bool {
	switch {
	case g.Bucket != "":
		return bucket == g.Bucket
	case g.BucketPrefix != "":
		return bucket != "" && strings.HasPrefix(bucket, g.BucketPrefix)
	}
	return true
}

// Caps are an entity's capabilities: per service, the grants it holds.
// The zero value allows nothing.
type Caps map[string][]Grant

// ParseCaps parses capabilities as "osprey auth" takes them and records
// keep them: per service, a string in Ceph's syntax, e.g.
//
//	mon: allow r
//	osd: allow rw bucket=photos, allow r bucket_prefix=logs-
//
// A service's string is grants separated by commas; a grant is "allow"
// then "*", permissions (r, w, x, combined: rw, rwx), or "profile osd";
// on the osd service a grant of permissions may end in bucket=NAME or
// bucket_prefix=PREFIX. An empty string grants nothing on that service.
func ParseCaps(in map[string]string) (Caps, error) {
	c := Caps{}
	for _, svc := range slices.Sorted(maps.Keys(in)) {
		gs, err := ParseServiceCaps(svc, in[svc])
		if err != nil {
			return nil, err
		}
		if len(gs) > 0 {
			c[svc] = gs
		}
	}
	return c, nil
}

// ParseServiceCaps parses one service's capabilities (see ParseCaps).
func ParseServiceCaps(service, s string) ([]Grant, error) {
	if service != ServiceMon && service != ServiceOSD {
		return nil, fmt.Errorf("%w: unknown service %q (want mon or osd)", ErrInvalidCaps, service)
	}
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var gs []Grant
	for clause := range strings.SplitSeq(s, ",") {
		g, err := parseGrant(service, strings.Fields(clause))
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q: %v", ErrInvalidCaps, service, strings.TrimSpace(clause), err)
		}
		gs = append(gs, g)
	}
	return gs, nil
}

func parseGrant(service string, f []string) (Grant, error) {
	if len(f) < 2 || f[0] != "allow" {
		return Grant{}, errors.New(`a grant is "allow" then "*", permissions (r, w, x) or "profile NAME"`)
	}
	if f[1] == "profile" {
		if len(f) != 3 {
			return Grant{}, errors.New(`"allow profile" takes one name`)
		}
		switch {
		case f[2] == ProfileOSD, f[2] == ProfileS3Gateway:
		case f[2] == ProfileBootstrapOSD && service == ServiceMon:
		default:
			return Grant{}, fmt.Errorf("unknown profile %q on %s (want %s, %s, or on mon %s)", f[2], service, ProfileOSD, ProfileS3Gateway, ProfileBootstrapOSD)
		}
		return Grant{Profile: f[2]}, nil
	}
	g := Grant{}
	if f[1] == "*" {
		g.Perm = PermAll
	} else {
		for _, r := range f[1] {
			var p Perm
			switch r {
			case 'r':
				p = PermRead
			case 'w':
				p = PermWrite
			case 'x':
				p = PermExec
			default:
				return Grant{}, fmt.Errorf("unknown permission %q (want r, w, x or *)", r)
			}
			if g.Perm&p != 0 {
				return Grant{}, fmt.Errorf("permission %q twice", r)
			}
			g.Perm |= p
		}
	}
	switch len(f) {
	case 2:
		return g, nil
	case 3:
	default:
		return Grant{}, errors.New("a grant ends after one bucket=NAME or bucket_prefix=PREFIX")
	}
	if service != ServiceOSD {
		return Grant{}, fmt.Errorf("%q: only osd grants name buckets", f[2])
	}
	k, v, _ := strings.Cut(f[2], "=")
	if v == "" {
		return Grant{}, fmt.Errorf("%q: want bucket=NAME or bucket_prefix=PREFIX", f[2])
	}
	// A name or prefix no bucket can have would grant nothing, or, as
	// ".multipart", the hidden objects of every bucket's uploads.
	if !bucketChars(v) {
		return Grant{}, fmt.Errorf("%q: a bucket name starts with a lowercase letter or digit and holds only those, '.' and '-'", f[2])
	}
	switch k {
	case "bucket":
		g.Bucket = v
	case "bucket_prefix":
		g.BucketPrefix = v
	default:
		return Grant{}, fmt.Errorf("%q: want bucket=NAME or bucket_prefix=PREFIX", f[2])
	}
	return g, nil
}

// bucketChars reports whether s could start a bucket's name (S3's rules,
// ops.CheckBucketName): a lowercase letter or digit first, then those,
// '.' and '-'.
func bucketChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '-') {
			return false
		}
	}
	return s != ""
}

// Strings formats the caps per service, canonically (ParseCaps of the
// result gives c back).
func (c Caps) Strings() map[string]string {
	out := make(map[string]string, len(c))
	for svc, gs := range c {
		parts := make([]string, len(gs))
		for i, g := range gs {
			parts[i] = g.String()
		}
		out[svc] = strings.Join(parts, ", ")
	}
	return out
}

// String formats the caps as the CLI shows them: mon 'allow r' osd '...'.
func (c Caps) String() string { return FormatCaps(c.Strings()) }

// FormatCaps formats caps per service as the CLI shows them, sorted by
// service: mon 'allow r' osd 'allow rw'; "(none)" for none.
func FormatCaps(perService map[string]string) string {
	var parts []string
	for _, svc := range slices.Sorted(maps.Keys(perService)) {
		parts = append(parts, fmt.Sprintf("%s '%s'", svc, perService[svc]))
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, " ")
}

// Allows reports whether c grants every permission of want on service,
// for bucket ("" for an op that names no bucket). Grants add up: "allow
// r, allow w bucket=b" allows rw on b.
func (c Caps) Allows(service string, want Perm, bucket string) bool {
	var have Perm
	for _, g := range c[service] {
		if g.Profile == ProfileBootstrapOSD {
			continue // its one command is checked by HasProfile
		}
		if g.Profile == ProfileOSD || g.Profile == ProfileS3Gateway {
			// An OSD daemon reads the map (its boot, beacons and reports
			// are the profile's own ops, see HasProfile) and reads and
			// writes every object; it never changes the map or auth. An
			// S3 gateway does the same for its users.
			have |= PermRead
			if service == ServiceOSD {
				have |= PermWrite
			}
			continue
		}
		if g.covers(bucket) {
			have |= g.Perm
		}
	}
	return want&^have == 0
}

// AllowsSome reports whether c grants want on service for some bucket
// (one grant, whatever bucket it names).
func (c Caps) AllowsSome(service string, want Perm) bool {
	for _, g := range c[service] {
		if g.Profile == ProfileBootstrapOSD {
			continue
		}
		if g.Profile == ProfileOSD || g.Profile == ProfileS3Gateway || want&^g.Perm == 0 {
			return true
		}
	}
	return false
}

// HasProfile reports whether c grants service's profile name.
func (c Caps) HasProfile(service, name string) bool {
	return slices.ContainsFunc(c[service], func(g Grant) bool { return g.Profile == name })
}

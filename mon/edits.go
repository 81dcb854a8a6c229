package mon

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// The map edits: pure functions of the current map's proto (at the epoch
// it was read at; the map they make is that epoch + 1) and a request. They
// do no I/O and keep no state, so the transaction loop can run them again
// after a conflict, and tests and the fuzz target can drive them directly.

// applyBoot marks the booting OSD up in pb and returns its id. It
// assumes validateBoot passed and the fsid was checked.
func applyBoot(pb *osdpb.ClusterMap, b *osdpb.MonBoot) (uint32, error) {
	newEpoch := pb.Epoch + 1
	var o *osdpb.OSDInfo
	if b.HasId {
		o = osdByID(pb, b.Id)
		switch {
		case o == nil:
			return 0, ops.Errorf(osdpb.Status_WRONG_CLUSTER, "osd.%d does not exist in cluster %s (removed with \"osd rm\"?); boot without an id to get a new one", b.Id, pb.Fsid)
		case o.Uuid != "" && o.Uuid != b.Uuid:
			return 0, ops.Errorf(osdpb.Status_WRONG_CLUSTER, "osd.%d belongs to another daemon (uuid %s, not %s)", b.Id, o.Uuid, b.Uuid)
		}
		if other := osdByUUID(pb, b.Uuid); other != nil && other.Id != b.Id {
			return 0, ops.Errorf(osdpb.Status_WRONG_CLUSTER, "uuid %s is osd.%d's, not osd.%d's", b.Uuid, other.Id, b.Id)
		}
	} else {
		o = osdByUUID(pb, b.Uuid)
	}
	noin := slices.Contains(pb.Flags, placement.FlagNoIn)
	if o == nil {
		// A new OSD: the lowest free id, weight as given (0 means 1), in
		// (out under noin, until an operator's osd in).
		o = &osdpb.OSDInfo{Id: lowestFreeID(pb), Weight: b.Weight, In: !noin}
		if o.Weight == 0 {
			o.Weight = 1
		}
		pb.Osds = append(pb.Osds, o)
		slices.SortFunc(pb.Osds, func(a, b *osdpb.OSDInfo) int { return cmp.Compare(a.Id, b.Id) })
	}
	if o.UpFrom == 0 || b.FreshStore {
		// A store made now (a new OSD, or a replaced disk under its old
		// id): what the id held before is gone (Map.GivenUp). An OSD
		// that "osd create" made and that never booted held nothing
		// either.
		o.Born = newEpoch
	}
	o.Uuid = b.Uuid
	o.PublicAddr = b.PublicAddr
	o.ClusterAddr = b.ClusterAddr
	if o.ClusterAddr == "" {
		o.ClusterAddr = b.PublicAddr
	}
	o.Host = b.Host
	o.Fullness = b.Fullness
	o.Features = b.Features
	o.Version = b.Version
	o.Up = true
	o.Dead = false
	o.UpFrom = newEpoch
	o.DownSinceUnixNano = 0
	if o.AutoOut && !noin {
		// The mon marked it out for being down; an operator's out stays,
		// and under noin every out.
		o.In, o.AutoOut = true, false
	}
	return o.Id, nil
}

// markDown marks the up OSDs among ids down at now and returns those it
// changed. upFromAtMost, when not 0, spares an OSD that booted after the
// report was made (its up_from is newer): that is another incarnation.
// dead: its process is known to be gone (OSDInfo.dead).
func markDown(pb *osdpb.ClusterMap, ids []uint32, now time.Time, upFromAtMost uint64, dead bool) []uint32 {
	var changed []uint32
	for _, id := range ids {
		o := osdByID(pb, id)
		if o == nil || !o.Up || (upFromAtMost != 0 && o.UpFrom > upFromAtMost) {
			continue
		}
		o.Up = false
		o.Dead = dead
		o.DownSinceUnixNano = now.UnixNano()
		changed = append(changed, id)
	}
	return changed
}

// downOut marks out, automatically, the in OSDs that have been down for
// longer than interval, longest down first, and returns them; and the
// ones it held back: as Ceph's mon_osd_min_in_ratio, it marks no more out
// once fewer than minIn (a fraction) of the OSDs are in, so that a rack
// or a power feed that goes down for longer than the interval does not
// start the survivors re-replicating everything, past their room. minIn
// 0 or less: no floor.
func downOut(pb *osdpb.ClusterMap, now time.Time, interval time.Duration, minIn float64) (out, held []uint32) {
	if interval < 0 || slices.Contains(pb.Flags, placement.FlagNoOut) { // NeverOut, or an operator's noout
		return nil, nil
	}
	var due []*osdpb.OSDInfo
	in := 0
	for _, o := range pb.Osds {
		if o.In {
			in++
		}
		if o.Up || !o.In || o.DownSinceUnixNano == 0 || now.Sub(time.Unix(0, o.DownSinceUnixNano)) <= interval {
			continue
		}
		due = append(due, o)
	}
	slices.SortFunc(due, func(a, b *osdpb.OSDInfo) int {
		return cmp.Or(cmp.Compare(a.DownSinceUnixNano, b.DownSinceUnixNano), cmp.Compare(a.Id, b.Id))
	})
	for _, o := range due {
		// Ceph's test: the in ratio before this one goes out.
		if minIn > 0 && float64(in) < minIn*float64(len(pb.Osds)) {
			held = append(held, o.Id)
			continue
		}
		o.In, o.AutoOut = false, true
		in--
		out = append(out, o.Id)
	}
	return out, held
}

// osdCommand is a map-changing operator command.
type osdCommand struct {
	prefix string // "osd out", "osd in", "osd down", "osd rm", "osd reweight", a ratioCommands, "osd pool set"
	ids    []uint32
	weight float64
	ratio  float64 // ratioCommands
	// "osd pool set": the pool's name, the variable and its value, and
	// whether the operator said --yes-i-really-mean-it.
	pool, variable, value string
	sure                  bool // also "osd rm" of an OSD that is in, and "osd lost"
}

// commandOf is the map-changing command a MonCommand asks for.
func commandOf(c *osdpb.MonCommand) osdCommand {
	return osdCommand{prefix: c.Prefix, ids: c.Ids, weight: c.Weight, ratio: c.Ratio, pool: c.Pool, variable: c.Var, value: c.Val, sure: c.Sure}
}

// MaxPoolSize is the most replicas a pool may have, Ceph's limit.
const MaxPoolSize = 10

// PoolVars are the variables "osd pool set" changes.
var PoolVars = []string{"size", "min_size"}

// validatePoolSet checks "osd pool set" on its own: a pool named, a
// variable it can change, a count in 1..MaxPoolSize.
func (c osdCommand) validatePoolSet() (uint32, error) {
	if c.pool == "" {
		return 0, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd pool set: no pool named")
	}
	switch c.variable {
	case "size", "min_size":
	case "pg_num", "pgp_num":
		return 0, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd pool set %s %s: a pool's PG count is fixed when the cluster is made (PGs do not split or merge)", c.pool, c.variable)
	default:
		return 0, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd pool set %s: unknown variable %q; known: %s", c.pool, c.variable, strings.Join(PoolVars, ", "))
	}
	n, err := strconv.ParseUint(c.value, 10, 32)
	if err != nil || n < 1 || n > MaxPoolSize {
		return 0, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd pool set %s %s %q: want a whole number from 1 to %d", c.pool, c.variable, c.value, MaxPoolSize)
	}
	return uint32(n), nil
}

// applyPoolSet sets a pool's size or min_size in pb. As in Ceph, a new
// size sets min_size back to its default for that size (size - size/2).
// Without sure it refuses size 1 (one copy: a lost disk loses data), and
// a change that leaves min_size above the OSDs in (no PG could take a
// write).
func (c osdCommand) applyPoolSet(pb *osdpb.ClusterMap) error {
	n, err := c.validatePoolSet()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(pb.Pools, func(p *osdpb.Pool) bool { return p.Name == c.pool })
	if i < 0 {
		names := make([]string, len(pb.Pools))
		for j, p := range pb.Pools {
			names[j] = p.Name
		}
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd pool set: no pool %q in epoch %d (pools: %s)", c.pool, pb.Epoch, strings.Join(names, ", "))
	}
	p := pb.Pools[i]
	next := &osdpb.Pool{Size: p.Size, MinSize: p.MinSize}
	switch c.variable {
	case "size":
		if p.Size == n {
			return errNoChange
		}
		if n == 1 && !c.sure {
			return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd pool set %s size 1 keeps one copy of every object, so one lost disk loses data: say --yes-i-really-mean-it", c.pool)
		}
		next.Size, next.MinSize = n, 0
	case "min_size":
		if n > p.Size {
			return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd pool set %s min_size %d: above its size %d", c.pool, n, p.Size)
		}
		if p.MinSize == n { // one at its default gets pinned: it then stays until the next size change
			return errNoChange
		}
		next.MinSize = n
	}
	in := 0
	for _, o := range pb.Osds {
		if o.In && o.Weight > 0 {
			in++
		}
	}
	if ms := placement.MinSize(next); ms > in && !c.sure {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd pool set %s %s %d: min_size would be %d with %d OSDs in, so no PG could take a write: say --yes-i-really-mean-it", c.pool, c.variable, n, ms, in)
	}
	p.Size, p.MinSize = next.Size, next.MinSize
	return nil
}

// ratioCommands set the map's full ratios, as Ceph's `ceph osd
// set-full-ratio` and its siblings; they name no OSD.
var ratioCommands = []string{"osd set-nearfull-ratio", "osd set-backfillfull-ratio", "osd set-full-ratio"}

// mutatingCommands are the commands that change the map (leader only).
var mutatingCommands = append([]string{"osd out", "osd in", "osd down", "osd rm", "osd lost", "osd reweight", "osd pool set", "osd set", "osd unset"}, ratioCommands...)

// flagCommands set and unset an osdmap flag (osdCommand.variable), as
// Ceph's `ceph osd set noout`.
var flagCommands = []string{"osd set", "osd unset"}

// applyFlag sets or unsets c's flag (validate checked it) in pb,
// keeping the flags sorted.
func (c osdCommand) applyFlag(pb *osdpb.ClusterMap) error {
	set := slices.Contains(pb.Flags, c.variable)
	switch {
	case c.prefix == "osd set" && !set:
		pb.Flags = append(pb.Flags, c.variable)
		slices.Sort(pb.Flags)
	case c.prefix == "osd unset" && set:
		pb.Flags = slices.DeleteFunc(pb.Flags, func(f string) bool { return f == c.variable })
	default:
		return errNoChange
	}
	return nil
}

// ratioField is the map field a ratio command sets.
func ratioField(pb *osdpb.ClusterMap, prefix string) *float64 {
	switch prefix {
	case "osd set-nearfull-ratio":
		return &pb.NearfullRatio
	case "osd set-backfillfull-ratio":
		return &pb.BackfillfullRatio
	case "osd set-full-ratio":
		return &pb.FullRatio
	}
	return nil
}

// validate checks what does not depend on the map.
func (c osdCommand) validate() error {
	if slices.Contains(ratioCommands, c.prefix) {
		if r := c.ratio; math.IsNaN(r) || r <= 0 || r > 1 {
			return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%s: %v: want a fraction in (0, 1]", c.prefix, r)
		}
		return nil
	}
	if c.prefix == "osd pool set" {
		_, err := c.validatePoolSet()
		return err
	}
	if slices.Contains(flagCommands, c.prefix) {
		if !slices.Contains(placement.Flags, c.variable) {
			return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%s %q: known flags: %s", c.prefix, c.variable, strings.Join(placement.Flags, ", "))
		}
		return nil
	}
	if len(c.ids) == 0 {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%q needs at least one OSD id", c.prefix)
	}
	if c.prefix == "osd reweight" {
		if w := c.weight; !validWeight(w) {
			return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd reweight: weight %v: want a number from 0 to %d", w, MaxWeight)
		}
	}
	return nil
}

// apply runs the command on pb and returns the OSDs it changed; none
// changed is errNoChange. Unknown ids fail the whole command.
func (c osdCommand) apply(pb *osdpb.ClusterMap, now time.Time) ([]uint32, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if f := ratioField(pb, c.prefix); f != nil {
		if *f == c.ratio {
			return nil, errNoChange
		}
		*f = c.ratio
		if err := placement.CheckRatios(pb); err != nil {
			return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%s %v: %v", c.prefix, c.ratio, err)
		}
		return []uint32{}, nil
	}
	if c.prefix == "osd pool set" {
		if err := c.applyPoolSet(pb); err != nil {
			return nil, err
		}
		return []uint32{}, nil
	}
	if slices.Contains(flagCommands, c.prefix) {
		if err := c.applyFlag(pb); err != nil {
			return nil, err
		}
		return []uint32{}, nil
	}
	var unknown []string
	for _, id := range c.ids {
		if osdByID(pb, id) == nil {
			unknown = append(unknown, fmt.Sprintf("osd.%d", id))
		}
	}
	if len(unknown) > 0 {
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%s: no such OSD in epoch %d: %s", c.prefix, pb.Epoch, strings.Join(unknown, ", "))
	}
	var changed []uint32
	switch c.prefix {
	case "osd down":
		changed = markDown(pb, c.ids, now, 0, false)
	case "osd rm":
		for _, id := range c.ids {
			o := osdByID(pb, id)
			if o.Up {
				return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd rm: osd.%d is up; mark it down (and stop it) first", id)
			}
			if o.In && !c.sure {
				// Its PGs have not moved: it may hold the only copy of
				// some writes, and peering may be waiting for it. The
				// safe way is out, backfill, then rm.
				return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd rm: osd.%d is still in: mark it out and let its PGs backfill (status HEALTH_OK) first, or say --yes-i-really-mean-it to drop what only it holds", id)
			}
		}
		for _, id := range dedup(c.ids) {
			pb.Osds = slices.DeleteFunc(pb.Osds, func(o *osdpb.OSDInfo) bool { return o.Id == id })
			changed = append(changed, id)
		}
	case "osd lost":
		for _, id := range c.ids {
			if osdByID(pb, id).Up {
				return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd lost: osd.%d is up, with its data: nothing is lost", id)
			}
		}
		if !c.sure {
			return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd lost %v: peering stops waiting for these OSDs, and writes that only they hold are gone for good: say --yes-i-really-mean-it", c.ids)
		}
		for _, id := range dedup(c.ids) {
			if o := osdByID(pb, id); !lossStands(o) {
				// Lost from the epoch this edit makes. One that came back
				// since an earlier loss (up_from after it) is lost anew:
				// intervals it served since then are no longer given up.
				o.LostAt = pb.Epoch + 1
				changed = append(changed, id)
			}
		}
	default:
		for _, id := range dedup(c.ids) {
			o := osdByID(pb, id)
			switch c.prefix {
			case "osd out":
				if !o.In && !o.AutoOut {
					continue
				}
				// Out by the operator now, even if the mon had marked it
				// out: the next boot keeps it out.
				o.In, o.AutoOut = false, false
			case "osd in":
				if o.In {
					continue
				}
				o.In, o.AutoOut = true, false
			case "osd reweight":
				if o.Weight == c.weight {
					continue
				}
				o.Weight = c.weight
			default:
				return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "unknown command %q", c.prefix)
			}
			changed = append(changed, id)
		}
	}
	if len(changed) == 0 {
		return nil, errNoChange
	}
	return changed, nil
}

// checkFullness refuses a level this mon does not know (a hostile or newer
// OSD's).
func checkFullness(f osdpb.Fullness) error {
	if _, ok := osdpb.Fullness_name[int32(f)]; !ok {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "fullness %d is unknown", f)
	}
	return nil
}

// applyFullness records in pb how full OSD id said it is.
func applyFullness(pb *osdpb.ClusterMap, id uint32, f osdpb.Fullness) error {
	o := osdByID(pb, id)
	if o == nil || o.Fullness == f {
		return errNoChange
	}
	o.Fullness = f
	return nil
}

// validateBoot checks a boot request on its own.
func validateBoot(b *osdpb.MonBoot) error {
	if r := checkLabel(b.Uuid, 128); r != "" {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "boot: uuid %s", r)
	}
	if err := checkFullness(b.Fullness); err != nil {
		return err
	}
	if b.PublicAddr == "" {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "boot: public_addr is missing")
	}
	if b.Host != "" {
		if r := checkLabel(b.Host, 255); r != "" {
			return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "boot: host %s", r)
		}
	}
	if w := b.Weight; !validWeight(w) {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "boot: weight %v: want a number from 0 to %d", w, MaxWeight)
	}
	return nil
}

// checkLabel accepts non-empty printable UTF-8 of at most max bytes: what
// ends up in the map, logs and JSON.
func checkLabel(s string, max int) string {
	switch {
	case s == "":
		return "is missing"
	case len(s) > max:
		return fmt.Sprintf("is %d bytes long; at most %d", len(s), max)
	case !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return fmt.Sprintf("%q is not printable UTF-8", s)
	}
	return ""
}

// lossStands reports whether OSD o was declared lost (osd lost) and has
// not booted since: a boot after the loss (up_from past lost_at) ends it.
func lossStands(o *osdpb.OSDInfo) bool { return o.LostAt != 0 && o.LostAt >= o.UpFrom }

func osdByID(pb *osdpb.ClusterMap, id uint32) *osdpb.OSDInfo {
	for _, o := range pb.Osds {
		if o.Id == id {
			return o
		}
	}
	return nil
}

func osdByUUID(pb *osdpb.ClusterMap, uuid string) *osdpb.OSDInfo {
	for _, o := range pb.Osds {
		if o.Uuid == uuid {
			return o
		}
	}
	return nil
}

// lowestFreeID is the smallest id no OSD of pb has, as Ceph's "osd new"
// allocates.
func lowestFreeID(pb *osdpb.ClusterMap) uint32 {
	used := make([]uint32, 0, len(pb.Osds))
	for _, o := range pb.Osds {
		used = append(used, o.Id)
	}
	slices.Sort(used)
	var id uint32
	for _, u := range used {
		if u == id {
			id++
		} else if u > id {
			break
		}
	}
	return id
}

func dedup(ids []uint32) []uint32 {
	s := slices.Clone(ids)
	slices.Sort(s)
	return slices.Compact(s)
}

// MaxWeight is the largest straw2 weight an OSD may have, Ceph's CRUSH
// limit (16.16 fixed point): weights are a disk's TiB by convention, and
// one of 1e300 took every PG of a cluster.
const MaxWeight = 65535

// validWeight: a weight from 0 to MaxWeight (NaN is neither).
func validWeight(w float64) bool { return w >= 0 && w <= MaxWeight }

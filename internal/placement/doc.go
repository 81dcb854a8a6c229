// Package placement is the cluster map and the placement function: which
// OSDs hold which placement group (PG), and which PG holds which object.
// Clients and OSDs both compute placement from the same Map, so they agree
// on every PG's primary without asking anyone.
//
// # Placement
//
// An object (bucket, key) belongs to PG ObjectHash(bucket, key) mod
// pg_count of its pool (PGOf). straw2 ranks the OSDs that are in and of
// weight > 0, up or down; a PG's acting set is the up ones among its top
// pool.size, and the first is the primary (Map.ActingSet, Map.Primary). A
// down OSD keeps its place, so its PGs run undersized until it is marked
// out, as with Ceph's CRUSH; writes go on while min_size members are up
// (MinSize). That ranking's up members are the PG's up set (Map.UpSet);
// its acting set is the up set unless the map has a pg_temp entry for it
// (Map.PGTemp), whose up members then act instead while the up set's new
// members are backfilled (Ceph's pg_temp; the PG is "remapped"). Bucket
// records live in the special PG MetaPG, whose acting set is every up and
// in OSD. DESIGN.md
// ("OSD contracts") fixes this scheme; docs in this package say how each
// step is made stable.
//
// # Cluster map
//
// A Map is an immutable, validated view of an osdpb.ClusterMap. FromProto,
// Unmarshal and Load accept a map only if
//
//   - epoch >= 1, and fsid is non-empty printable UTF-8 (at most 128 bytes);
//   - OSD ids are unique (a new cluster may have none yet), weights are finite and
//     >= 0, and public_addr and cluster_addr are tcp://HOST:PORT,
//     rdma+PROVIDER://HOST:PORT or mem://NAME, with a lower-case scheme, an
//     IP address or host name, and a port of 1..65535 (parsed, never
//     resolved or dialed);
//   - pool ids are unique and at most MaxPoolID, names are unique, names are non-empty printable UTF-8,
//     size >= 1, 1 <= pg_count <= MaxPGCount, and min_size <= size
//     (0 meaning unset);
//   - pg_temp entries are sorted by pool and pg, each PG once, each with
//     at least one OSD, none twice; an entry of a pool or PG the map does
//     not have, naming an OSD it does not have, or longer than its pool's
//     size is ignored (an older mon keeps entries it does not tidy).
//
// A violation is a *MapError naming the field. Changes make a new Map with
// a higher epoch (Map.With).
//
// # File format
//
// A map file (`osprey osd --map FILE`) is the protojson form of a
// ClusterMap. Save writes every field, camelCase names, two-space indent;
// Load also accepts the proto names (pg_count) and omitted fields (zero),
// but rejects unknown fields. uint64 values (the epoch) are JSON strings, as
// protojson writes them; Load takes numbers too.
//
//	{
//	  "epoch": "1",
//	  "fsid": "0f6e3c52-8a8b-4c3e-9a41-6a0b2f1d9e77",
//	  "osds": [
//	    {
//	      "id": 0,
//	      "publicAddr": "tcp://10.0.0.1:6800",
//	      "clusterAddr": "rdma+verbs://192.168.0.1:6900",
//	      "weight": 1,
//	      "up": true,
//	      "in": true
//	    }
//	  ],
//	  "pools": [
//	    {
//	      "id": 1,
//	      "name": "default",
//	      "size": 1,
//	      "pgCount": 128,
//	      "minSize": 1
//	    }
//	  ]
//	}
//
// # What this package must never do
//
//   - I/O, other than Load and Save reading and writing the map file: no
//     resolving or dialing of addresses, no clocks, no logging.
//   - Depend on Go map iteration order, process-seeded hashes
//     (hash/maphash) or platform-dependent float functions (math.Log) in
//     anything that decides placement: two processes, on any hardware, must
//     compute the same acting sets from the same map.
//   - Change ObjectHash or the straw2 draw (drawHash, drawCost): every
//     object would move. The golden tests fail if they change.
//   - Let a caller mutate a Map: everything it hands out is a copy.
//   - Panic on any input map, however malformed.
package placement

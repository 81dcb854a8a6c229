// Package auth holds who is who in an Osprey cluster: entities, their
// credentials and their capabilities, as Ceph's cephx keyring and caps do.
//
// # Entities and credentials
//
// Every daemon and client is an entity named TYPE.ID: mon.a, osd.3,
// client.admin. Its credential is an X.509 certificate whose subject
// common name is the entity's name, signed by the cluster's certificate
// authority (CA), with the certificate's Ed25519 private key beside it.
// The mon keeps the CA (its key included) and every entity's record in
// etcd, and is the only issuer: "osprey auth get-or-create" makes a key
// pair and certificate and hands them out in a keyring file.
//
// Why certificates and not cephx's shared secrets: a peer can check a
// certificate with nothing but the CA certificate, so an OSD proves a
// client's name without asking the mon for the client's secret, and the
// handshake can be TLS 1.3 (crypto/tls) carried in messenger frames, a
// vetted construction, with the session keys of secure mode taken from it
// by ExportKeyingMaterial; no cryptography of Osprey's own. A certificate
// is not revoked by expiry (it is valid for ten years): the mon's record
// names the serial of the one certificate the entity holds now, and a peer
// whose certificate is not that one, or whose entity has no record, is
// refused. "auth rm" removes an entity at once.
//
// # Keyrings
//
// A keyring file is PEM: the entity's certificate, its private key
// (PKCS #8) and the CA's certificate, each after a comment line naming it;
// openssl reads it as it is. It is written with mode 0600, and LoadKeyring
// refuses one that others may read, as ssh does, because the key in it is
// the entity.
//
// # Capabilities
//
// An entity's capabilities say what it may do, per service, in Ceph's
// syntax (see ParseCaps): mon 'allow r' reads the map and status, mon
// 'allow rw' changes it, mon 'allow *' also manages auth; osd 'allow rw
// bucket=photos' reads and writes one bucket. They live in the entity's
// record at the mon and are enforced where the op lands: the mon for its
// commands, the OSD for object ops (an S3-style AccessDenied).
package auth

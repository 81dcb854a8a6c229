package wire

import (
	"encoding/binary"
	"fmt"
)

// Banner is the first thing each side writes on a new link, before any
// frame: a magic, the protocol version and feature bits. A peer that speaks
// another protocol or lacks a required feature is refused before anything
// else is parsed.
//
// Layout: 8-byte magic "OSPREYMS", u16 version, u16 and u32 reserved (zero),
// u64 supported features, u64 required features (little endian).
type Banner struct {
	Version   uint16
	Supported uint64
	Required  uint64
}

// BannerSize is the encoded size of a Banner.
const BannerSize = 32

// Version is the protocol version this code speaks. Version 2 added the
// tid to the preamble; a version 1 peer is refused at the banner.
const Version = 2

var bannerMagic = [8]byte{'O', 'S', 'P', 'R', 'E', 'Y', 'M', 'S'}

// Feature bits.
const (
	// FeatureNoDataCRC: the peer accepts frames whose data segment has no
	// CRC (FlagNoDataCRC), like Ceph's ms_crc_data=false.
	FeatureNoDataCRC uint64 = 1 << 0
	// FeatureRendezvous: the peer can move large payloads by rendezvous
	// (RDMA read or write). Only RDMA links offer it (Banner.Stream).
	FeatureRendezvous uint64 = 1 << 1
	// FeatureControlSlots: KEEPALIVE, KEEPALIVE_ACK and CLOSE take no
	// credit; the receiver keeps a slot for each instead (one unanswered
	// keepalive each way, one CLOSE), so a side can always probe, answer
	// and close, and a silent link is a dead one.
	FeatureControlSlots uint64 = 1 << 2
	// FeatureSourceCRC: the peer accepts frames whose data CRC is their
	// source's claim (FlagSourceCRC), which it checks without failing
	// the link on a mismatch. A sender whose peer lacks it computes the
	// data CRC over the bytes it sends instead.
	FeatureSourceCRC uint64 = 1 << 3
	// FeatureRendezvousFront: the peer takes a rendezvous frame whose
	// front is moved with its payload, after the data, instead of inline
	// (FlagRendezvousFront): a front larger than the peer's receive
	// buffers (an RDMA link's BufSize) can then go at all. Only RDMA links
	// offer it, with FeatureRendezvous.
	FeatureRendezvousFront uint64 = 1 << 4
	// KnownFeatures is every bit this version understands.
	KnownFeatures = FeatureNoDataCRC | FeatureRendezvous | FeatureControlSlots | FeatureSourceCRC | FeatureRendezvousFront
)

// Stream is the banner a link that moves bytes, not RDMA operations
// (TCP, in memory), sends for bn: without RENDEZVOUS, which it refuses.
// A peer that offers it still agrees on the rest.
func (bn Banner) Stream() Banner {
	bn.Supported &^= FeatureRendezvous | FeatureRendezvousFront
	return bn
}

// Put encodes the banner into b[:BannerSize].
func (bn *Banner) Put(b []byte) {
	_ = b[BannerSize-1]
	copy(b, bannerMagic[:])
	binary.LittleEndian.PutUint16(b[8:], bn.Version)
	binary.LittleEndian.PutUint16(b[10:], 0)
	binary.LittleEndian.PutUint32(b[12:], 0)
	binary.LittleEndian.PutUint64(b[16:], bn.Supported)
	binary.LittleEndian.PutUint64(b[24:], bn.Required)
}

// ParseBanner decodes a banner.
func ParseBanner(b []byte) (Banner, error) {
	var bn Banner
	if len(b) < BannerSize {
		return bn, &Error{Kind: ErrKindBanner, Msg: fmt.Sprintf("banner needs %d bytes, have %d", BannerSize, len(b))}
	}
	if [8]byte(b[:8]) != bannerMagic {
		return bn, &Error{Kind: ErrKindBanner, Msg: fmt.Sprintf("bad magic %q: the peer does not speak the osprey messenger protocol", b[:8])}
	}
	bn.Version = binary.LittleEndian.Uint16(b[8:])
	bn.Supported = binary.LittleEndian.Uint64(b[16:])
	bn.Required = binary.LittleEndian.Uint64(b[24:])
	return bn, nil
}

// Negotiate checks a peer banner against ours and returns the features both
// sides use.
func Negotiate(mine, peer Banner) (uint64, error) {
	if peer.Version != mine.Version {
		return 0, &Error{Kind: ErrKindBanner, Msg: fmt.Sprintf("peer speaks protocol version %d, this side %d", peer.Version, mine.Version)}
	}
	if bad := peer.Required &^ peer.Supported; bad != 0 {
		return 0, &Error{Kind: ErrKindBanner, Msg: fmt.Sprintf("peer requires features %#x it does not support", bad)}
	}
	// The same check on our side keeps the outcome symmetric: both ends
	// of a link agree on whether it may exist.
	if bad := mine.Required &^ mine.Supported; bad != 0 {
		return 0, &Error{Kind: ErrKindBanner, Msg: fmt.Sprintf("this side requires features %#x it does not support", bad)}
	}
	if missing := peer.Required &^ mine.Supported; missing != 0 {
		return 0, &Error{Kind: ErrKindBanner, Msg: fmt.Sprintf("peer requires features %#x this side lacks", missing)}
	}
	if missing := mine.Required &^ peer.Supported; missing != 0 {
		return 0, &Error{Kind: ErrKindBanner, Msg: fmt.Sprintf("this side requires features %#x the peer lacks", missing)}
	}
	return mine.Supported & peer.Supported, nil
}

package main

import (
	"strings"

	"github.com/ospreystore/osprey/msgr"
)

// modesFlag is a connection-mode flag in the Ceph spirit (--ms-cluster-mode,
// --ms-service-mode, --ms-client-mode): crc, secure, prefer-crc,
// prefer-secure, or modes in order of preference separated by commas.
type modesFlag struct{ modes *[]msgr.Mode }

func (f modesFlag) String() string {
	if f.modes == nil || len(*f.modes) == 0 {
		return string(msgr.ModeCRC)
	}
	s := make([]string, len(*f.modes))
	for i, m := range *f.modes {
		s[i] = string(m)
	}
	return strings.Join(s, ",")
}

func (f modesFlag) Set(v string) error {
	m, err := msgr.ParseModes(v)
	if err != nil {
		return err
	}
	*f.modes = m
	return nil
}

func (modesFlag) Type() string { return "crc|secure|prefer-crc|prefer-secure" }

const (
	clusterModeUsage = "connection mode between daemons (OSD to OSD, OSD to mon): crc, or secure (every frame sealed with AES-GCM; needs --auth cert), or prefer-secure / prefer-crc (Ceph's ms_cluster_mode)"
	serviceModeUsage = "connection modes accepted from clients: crc, secure, prefer-secure or prefer-crc (Ceph's ms_service_mode)"
	clientModeUsage  = "connection modes this client offers the cluster: crc, secure, prefer-secure or prefer-crc (Ceph's ms_client_mode)"
)

//go:build !rdma

package metrics

import "github.com/prometheus/client_golang/prometheus"

// rdmaCollect adds nothing: this build has no RDMA transport.
func rdmaCollect(chan<- prometheus.Metric, []Network) {}

var rdmaDescs []*prometheus.Desc

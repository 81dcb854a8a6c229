package metrics

import (
	"strconv"
	"sync"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/prometheus/client_golang/prometheus"
)

// Gateway counts an S3 gateway's requests; its Observe is the gateway's
// s3gw.Options.OnRequest.
type Gateway struct {
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	in, out  *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	bodies   prometheus.Gauge

	// series are each operation's and status's series, found once:
	// WithLabelValues hashes the labels and takes the vector's lock on
	// every call. Operations and statuses are few.
	mu     sync.RWMutex
	series map[seriesKey]*gatewaySeries
}

type seriesKey struct {
	op     string
	status int
	code   string
}

type gatewaySeries struct {
	requests, in, out prometheus.Counter
	errors            prometheus.Counter // nil for a request that succeeded
	latency           prometheus.Observer
}

// NewGateway registers the gateway's series in reg.
func NewGateway(reg prometheus.Registerer) *Gateway {
	g := &Gateway{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "osprey_s3_requests_total", Help: "S3 requests by operation and HTTP status.",
		}, []string{"op", "status"}),
		// By S3 error code: a 403 may be a wrong secret, an unknown key or
		// a skewed clock, a 503 SlowDown or the cluster refusing the
		// gateway. Codes are S3's few dozen.
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "osprey_s3_errors_total", Help: "S3 requests answered with an error, by operation and S3 error code.",
		}, []string{"op", "code"}),
		in: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "osprey_s3_received_bytes_total", Help: "Request body bytes received and verified, by operation.",
		}, []string{"op"}),
		out: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "osprey_s3_sent_bytes_total", Help: "Response body bytes sent, by operation.",
		}, []string{"op"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "osprey_s3_request_duration_seconds", Help: "S3 requests from their headers to their last byte, by operation.",
			// 1 ms to about 65 s: small requests to multi-GiB bodies.
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"op"}),
		bodies: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "osprey_s3_body_memory_bytes", Help: "Memory the request bodies in progress hold, of the gateway's --max-body-mib.",
		}),
	}
	reg.MustRegister(g.requests, g.errors, g.in, g.out, g.latency, g.bodies)
	return g
}

// InFlight reports the requests the gateway serves now (s3gw's
// Gateway.InFlight), read at each scrape; f may return 0 before there is
// a gateway.
func (g *Gateway) InFlight(reg prometheus.Registerer, f func() int64) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "osprey_s3_requests_in_flight", Help: "S3 requests being served now (waiting for the cluster included).",
	}, func() float64 { return float64(f()) }))
}

// BodyMemory sets the body memory gauge; it is the gateway's
// s3gw.Options.OnBodyMemory.
func (g *Gateway) BodyMemory(held int64) { g.bodies.Set(float64(held)) }

// GatewayRegistry is an S3 gateway's registry: its requests' series and
// its cluster client's messenger's. Give the Gateway's Observe to
// s3gw.Options.OnRequest.
func GatewayRegistry(cl *client.Client) (*prometheus.Registry, *Gateway) {
	reg := NewRegistry()
	reg.MustRegister(messengerCollector{{"public", cl.Messenger()}})
	return reg, NewGateway(reg)
}

// Observe counts one finished request.
func (g *Gateway) Observe(r s3gw.RequestInfo) {
	s := g.seriesOf(r.Op, r.Status, r.Error)
	s.requests.Inc()
	if s.errors != nil {
		s.errors.Inc()
	}
	s.in.Add(float64(r.BytesIn))
	s.out.Add(float64(r.BytesOut))
	s.latency.Observe(r.Duration.Seconds())
}

func (g *Gateway) seriesOf(op string, status int, code string) *gatewaySeries {
	k := seriesKey{op, status, code}
	g.mu.RLock()
	s := g.series[k]
	g.mu.RUnlock()
	if s != nil {
		return s
	}
	if op == "" {
		op = "Unknown" // refused before its operation was known
	}
	// "0": cut before a status was sent.
	s = &gatewaySeries{requests: g.requests.WithLabelValues(op, strconv.Itoa(status)), in: g.in.WithLabelValues(op),
		out: g.out.WithLabelValues(op), latency: g.latency.WithLabelValues(op)}
	if code != "" {
		s.errors = g.errors.WithLabelValues(op, code)
	}
	g.mu.Lock()
	if g.series == nil {
		g.series = make(map[seriesKey]*gatewaySeries)
	}
	g.series[k] = s
	g.mu.Unlock()
	return s
}

package metrics

import (
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMain makes every registry of the tests pedantic: a collector that
// collects a metric its Describe does not declare fails the scrape.
func TestMain(m *testing.M) {
	newRegistry = prometheus.NewPedanticRegistry
	os.Exit(m.Run())
}

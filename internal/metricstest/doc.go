// Package metricstest reads a test's Prometheus registry: the one way a test
// asks "how much has this metric counted", summed over the series it names.
//
// It is test support: only _test.go files import it.
package metricstest

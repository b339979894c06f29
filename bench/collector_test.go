package bench

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/bench/httplimits"
	"github.com/limitgen/limitgen/limitotel"
	"github.com/limitgen/limitgen/limitprom"
	"github.com/limitgen/limitgen/verdict"
	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// scrapeEvery is how often BenchmarkHTTPCollector's collectors are read
// while it runs: 1,500 times as often as Prometheus's default 15 s.
const scrapeEvery = 10 * time.Millisecond

// collectors attach nothing, a Prometheus collector gathered by a registry,
// or OpenTelemetry instruments read by the SDK's manual reader, over a
// middleware's counters and its rule's table; each reads them every
// scrapeEvery on a goroutine of its own until stop. reads counts the reads.
var collectors = []struct {
	name   string
	attach func(b *testing.B, mw *httplimits.Middleware, l *httplimits.Limits, reads *atomic.Int64) (stop func())
}{
	{"no-collector", func(*testing.B, *httplimits.Middleware, *httplimits.Limits, *atomic.Int64) func() { return func() {} }},
	{"prometheus", func(b *testing.B, mw *httplimits.Middleware, l *httplimits.Limits, reads *atomic.Int64) func() {
		reg := prometheus.NewRegistry()
		reg.MustRegister(limitprom.New(limitprom.Options{Doors: map[string]*verdict.Counters{verdict.DoorHTTP: mw.Config.Counters}, Tables: map[string]limitprom.Table{"PerIP": l.PerIP}}))
		return every(func() {
			if _, err := reg.Gather(); err != nil {
				b.Error(err)
			}
			reads.Add(1)
		})
	}},
	{"otel", func(b *testing.B, mw *httplimits.Middleware, l *httplimits.Limits, reads *atomic.Int64) func() {
		reader := sdkmetric.NewManualReader()
		provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		reg, err := limitotel.Register(provider.Meter("bench"), limitotel.Options{Doors: map[string]*verdict.Counters{verdict.DoorHTTP: mw.Config.Counters}, Tables: map[string]limitotel.Table{"PerIP": l.PerIP}})
		if err != nil {
			b.Fatal(err)
		}
		stop := every(func() {
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				b.Error(err)
			}
			reads.Add(1)
		})
		return func() { stop(); reg.Unregister(); provider.Shutdown(context.Background()) }
	}},
}

// every calls f every scrapeEvery until the returned stop is called.
func every(f func()) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(scrapeEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { close(done); <-finished }
}

// BenchmarkHTTPCollector is BenchmarkHTTP's allowed request through the
// generated middleware with no collector, with limitprom's and with
// limitotel's attached and read every 10 ms: serial (one client), and
// parallel (a client per goroutine, so that what goroutines share is the
// counters, not a bucket). Collectors read at scrape time what the
// middleware counts anyway, so the hot path is the same code with or
// without one; this measures what reading it every 10 ms costs the hot path
// (the cache lines the reads share with the counting cores, and the CPU the
// reads take on a 2-core machine). reads/op is the scrapes per request.
func BenchmarkHTTPCollector(b *testing.B) {
	for _, par := range []bool{false, true} {
		mode := "serial"
		if par {
			mode = "parallel"
		}
		b.Run("mode="+mode, func(b *testing.B) {
			for _, col := range rotated(collectors) {
				b.Run("impl="+col.name, func(b *testing.B) {
					l := httplimits.New()
					mw, err := httplimits.NewMiddleware(l)
					if err != nil {
						b.Fatal(err)
					}
					h := mw.Wrap(bare)
					var reads atomic.Int64
					stop := col.attach(b, mw, l, &reads)
					defer stop()
					b.ReportAllocs()
					if !par {
						r := benchRequest("/bench")
						w := &nopWriter{h: http.Header{}}
						for b.Loop() {
							clear(w.h)
							h.ServeHTTP(w, r)
						}
					} else {
						var client atomic.Int64
						b.RunParallel(func(pb *testing.PB) {
							r := benchRequest("/bench")
							r.RemoteAddr = "203.0.113." + strconv.FormatInt(client.Add(1), 10) + ":4000"
							w := &nopWriter{h: http.Header{}}
							for pb.Next() {
								clear(w.h)
								h.ServeHTTP(w, r)
							}
						})
					}
					b.ReportMetric(float64(reads.Load())/float64(b.N), "reads/op")
				})
			}
		})
	}
}

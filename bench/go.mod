module github.com/limitgen/limitgen/bench

go 1.26.0

replace github.com/limitgen/limitgen => ../

replace github.com/limitgen/limitgen/redisstore => ../redisstore

replace github.com/limitgen/limitgen/pgstore => ../pgstore

tool golang.org/x/perf/cmd/benchstat

require (
	github.com/go-chi/httprate v0.16.1
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.3.4
	github.com/jackc/pgx/v5 v5.12.0
	github.com/juju/ratelimit v1.0.2
	github.com/limitgen/limitgen v0.0.0
	github.com/limitgen/limitgen/limitgrpc v0.0.0-00010101000000-000000000000
	github.com/limitgen/limitgen/limitotel v0.0.0-00010101000000-000000000000
	github.com/limitgen/limitgen/limitprom v0.0.0-00010101000000-000000000000
	github.com/limitgen/limitgen/pgstore v0.0.0-00010101000000-000000000000
	github.com/limitgen/limitgen/redisstore v0.0.0-00010101000000-000000000000
	github.com/prometheus/client_golang v1.25.0
	github.com/puzpuzpuz/xsync/v3 v3.5.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/sethvargo/go-limiter v0.7.1
	github.com/throttled/throttled/v2 v2.15.0
	github.com/ulule/limiter/v3 v3.11.2
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	golang.org/x/time v0.16.0
	google.golang.org/grpc v1.85.0
)

require (
	github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/golang-lru v0.5.4 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/cpuid/v2 v2.4.0 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/zeebo/xxh3 v1.1.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/sdk v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261104224025-d1e00e9f33ab // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/limitgen/limitgen/limitprom => ../limitprom

replace github.com/limitgen/limitgen/limitotel => ../limitotel

replace github.com/limitgen/limitgen/limitgrpc => ../limitgrpc

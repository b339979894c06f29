module example.com/quickstart

go 1.26.0

tool github.com/limitgen/limitgen/gen

require (
	github.com/envoyproxy/go-control-plane/envoy v1.40.0
	github.com/go-chi/chi/v5 v5.5.0
	github.com/gorilla/mux v1.8.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/limitgen/limitgen v0.0.0
	github.com/limitgen/limitgen/limitgrpc v0.0.0-00010101000000-000000000000
	github.com/limitgen/limitgen/limitprom v0.0.0-00010101000000-000000000000
	github.com/limitgen/limitgen/limitrls v0.0.0-00010101000000-000000000000
	github.com/limitgen/limitgen/pgstore v0.0.0-00010101000000-000000000000
	github.com/limitgen/limitgen/redisstore v0.0.0-00010101000000-000000000000
	github.com/prometheus/client_golang v1.25.0
	github.com/redis/go-redis/v9 v9.23.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261104224025-d1e00e9f33ab
	google.golang.org/grpc v1.85.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/cncf/xds/go v0.0.0-20260202195803-dba9d589def2 // indirect
	github.com/dave/jennifer v1.7.1 // indirect
	github.com/envoyproxy/protoc-gen-validate v1.3.3 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/limitgen/limitgen/rlsserver v0.0.0-00010101000000-000000000000
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/puzpuzpuz/xsync/v3 v3.5.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// Inside the limitgen repository the example builds against this checkout; a
// real project drops this line and requires a released version.
replace github.com/limitgen/limitgen => ../..

replace github.com/limitgen/limitgen/redisstore => ../../redisstore

replace github.com/limitgen/limitgen/pgstore => ../../pgstore

replace github.com/limitgen/limitgen/limitprom => ../../limitprom

replace github.com/limitgen/limitgen/limitgrpc => ../../limitgrpc

replace github.com/limitgen/limitgen/limitrls => ../../limitrls

replace github.com/limitgen/limitgen/rlsserver => ../../rlsserver

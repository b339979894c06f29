module github.com/limitgen/limitgen/redisstore

go 1.26.0

require (
	github.com/limitgen/limitgen v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/puzpuzpuz/xsync/v3 v3.5.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

// Inside the limitgen repository the store builds against this checkout.
replace github.com/limitgen/limitgen => ../

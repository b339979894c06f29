module github.com/limitgen/limitgen/pgstore

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/puzpuzpuz/xsync/v3 v3.5.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/limitgen/limitgen v0.0.0
	golang.org/x/text v0.41.0 // indirect
)

replace github.com/limitgen/limitgen => ../

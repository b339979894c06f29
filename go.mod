module github.com/limitgen/limitgen

go 1.26.0

require (
	github.com/puzpuzpuz/xsync/v3 v3.5.1
	golang.org/x/sys v0.49.0
)

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/dave/jennifer v1.7.1
	go.yaml.in/yaml/v3 v3.0.4
)

require github.com/dunglas/httpsfv v1.1.2

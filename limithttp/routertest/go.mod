module github.com/limitgen/limitgen/limithttp/routertest

go 1.26.0

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/gorilla/mux v1.8.1
	github.com/limitgen/limitgen v0.0.0
)

require (
	github.com/puzpuzpuz/xsync/v3 v3.5.1 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

// The routers' test builds against this checkout.
replace github.com/limitgen/limitgen => ../..
